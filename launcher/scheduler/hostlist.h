// hostlist.h: Slurm hostlist and count-list syntax: "gpu[01-03,07],cpu5" <-> host names,
// "2(x2),1" <-> per-node counts.
//
// Hostlists are comma-separated items; each item is a name with any number of bracketed range
// lists ("rack[1-2]-n[01-04]" is the product of both ranges). Zero padding follows the lower bound
// of each range ("[08-10]" gives 08, 09, 10). Malformed text, or a host named twice, is a ConfigError that names `what`
// (the variable or flag it came from) and the expected syntax.
#pragma once

#include <string>
#include <vector>

namespace gtrain {

// Expands a hostlist to host names in order. Empty text gives an empty list.
std::vector<std::string> expand_hostlist(const std::string& text, const std::string& what);

// Compresses host names back to hostlist syntax, merging numeric suffixes of the same prefix
// (for display: ["gpu01","gpu02","gpu03"] -> "gpu[01-03]"). Order is kept.
std::string compress_hostlist(const std::vector<std::string>& hosts);

// Expands a Slurm count list such as SLURM_JOB_CPUS_PER_NODE or SLURM_TASKS_PER_NODE:
// "2(x2),1" -> {2, 2, 1}; "72(x3)" -> {72, 72, 72}.
std::vector<int> expand_count_list(const std::string& text, const std::string& what);

// The same machine: equal names, or equal short names (before the first '.'), as schedulers and
// gethostname() spell a node differently ("node1" vs "node1.cluster").
bool same_host(const std::string& a, const std::string& b);

}  // namespace gtrain
