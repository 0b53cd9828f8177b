// rank_output.h: prefixes everything a rank writes to stdout/stderr with "[rank N] " (multi-rank
// runs), through pipes drained by a thread; fatal messages bypass the pipe so they are never lost.
#pragma once

#include <cstddef>
#include <string>

namespace gtrain {

// Starts prefixing this process's stdout and stderr. Call once, early.
void start_rank_output_prefix(int rank);
// Flushes and restores the original stdout/stderr (at normal exit).
void stop_rank_output_prefix();
// Writes a line to the original stderr, prefixed, immediately (for errors before an abort).
void write_fatal_line(const std::string& line);

// The same from a signal handler (async-signal-safe: write(2) only): the parts, then a newline. The
// forwarding thread would not get to a message a handler writes to fd 2 before _exit.
void write_fatal_parts_signal_safe(const char* const* parts, size_t count);

// Reports a fatal error; in a multi-rank job stops every rank (MPI_Abort), else returns exit_code.
int fail_process(const std::string& message, int exit_code);

}  // namespace gtrain
