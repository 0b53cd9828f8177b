// tiny_configs.h: the table of small named jobs the end-to-end CLI suites run, and tiny_job(), which
// gives one by name with keys changed, so a suite states what it needs differently instead of
// keeping its own near-copy of a config.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace gtrain::test {

struct TinyConfig {
  const char* name;     // what suites ask for: tiny_job("gpt")
  const char* purpose;  // why it exists (what it exercises)
  const char* toml;     // the job; every section a suite may change appears in it
};

// The table, in the order test_cli_table.cpp runs it.
inline const std::vector<TinyConfig>& tiny_configs() {
  static const std::vector<TinyConfig> table = {
      {"mlp", "the smallest classifier: synthetic features, eval and progress lines", R"(
[model]
name = "mlp"
hidden = [16]
[data]
kind = "synthetic"
synthetic_samples = 512
synthetic_features = 8
synthetic_classes = 3
[train]
global_batch = 32
steps = 20
eval_interval = 10
[checkpoint]
interval = 0
[log]
progress = "plain"
interval = 5
)"},
      {"gpt", "the smallest transformer: two blocks of width 16, checkpoints every 2 steps", R"(
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 16
seq_len = 8
vocab = 32
[data]
kind = "synthetic"
[train]
global_batch = 4
steps = 4
[checkpoint]
interval = 2
[log]
progress = "none"
)"},
      {"gpt_small", "a transformer that takes a few seconds: one thread, so any layout sums in one order", R"(
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
seq_len = 32
vocab = 32
[data]
kind = "synthetic"
[optimizer]
learning_rate = 0.001
[train]
global_batch = 16
steps = 40
warmup_steps = 0
seed = 1234
threads = 1
[checkpoint]
interval = 0
[log]
progress = "none"
)"},
      {"cnn", "the quickstart's model on Fashion-MNIST files (idx), SGD with a linear decay", R"(
[model]
name = "cnn"
channels = [4, 8]
[data]
kind = "idx"
path = "/usr/share/datasets/fashion-mnist"
[optimizer]
name = "sgd"
learning_rate = 0.05
momentum = 0.9
[train]
global_batch = 32
steps = 6
lr_schedule = "linear"
eval_interval = 3
eval_batches = 2
threads = 1
[checkpoint]
interval = 0
[log]
interval = 1
progress = "none"
)"},
  };
  return table;
}

// The named job's TOML with `keys` ("section.key" -> TOML value) set: an existing key's line is
// replaced, a new key is added to its section (a new section at the end). An unknown name fails the
// calling test.
inline std::string tiny_job(const std::string& name, const std::map<std::string, std::string>& keys = {}) {
  const TinyConfig* found = nullptr;
  for (const auto& c : tiny_configs())
    if (name == c.name) found = &c;
  if (!found) {
    ADD_FAILURE() << "tiny_job: no config named '" << name << "' in tests/support/tiny_configs.h";
    return "";
  }
  std::vector<std::string> lines = test::lines(found->toml);  // TOML without its blank lines
  for (const auto& [dotted, value] : keys) {
    const size_t dot = dotted.find('.');
    const std::string section = "[" + dotted.substr(0, dot) + "]", key = dotted.substr(dot + 1);
    size_t in_section = lines.size(), replace = lines.size(), insert = lines.size();
    for (size_t i = 0; i < lines.size(); ++i) {
      if (!lines[i].empty() && lines[i][0] == '[') {
        if (in_section != lines.size() && insert == lines.size()) insert = i;
        if (lines[i] == section) in_section = i;
      } else if (in_section != lines.size() && insert == lines.size() && lines[i].rfind(key + " = ", 0) == 0) {
        replace = i;
      }
    }
    if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size()) {
      ADD_FAILURE() << "tiny_job(\"" << name << "\"): '" << dotted << "' is not section.key";
      continue;
    }
    if (in_section == lines.size()) {  // a section the job leaves at its defaults
      lines.push_back(section);
      lines.push_back(key + " = " + value);
      continue;
    }
    if (replace != lines.size())
      lines[replace] = key + " = " + value;
    else
      lines.insert(lines.begin() + static_cast<long>(insert), key + " = " + value);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace gtrain::test
