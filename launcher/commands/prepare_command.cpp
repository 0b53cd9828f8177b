// prepare_command.cpp: gtrain prepare: the tokenizer loaded, the pipeline run, what it made said.
#include "launcher/commands/prepare_command.h"

#include <ostream>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/text/encoder.h"
#include "runtime/core/text/prepare.h"

namespace gtrain {

int run_prepare_command(const PrepareCommandOptions& o, std::ostream& out) {
  const text::Encoder enc = text::load_encoder(o.tokenizer);
  text::PrepareOptions p;
  p.inputs = o.inputs;
  p.out = o.out;
  const bool conversations = o.format == "chat" || o.format == "prompt_completion";
  p.recipe.format = conversations ? "jsonl" : o.format;
  if (conversations) {
    p.recipe.data_format = o.format;
    p.recipe.messages_key = o.messages_key;
    p.recipe.prompt_key = o.prompt_key;
    p.recipe.completion_key = o.completion_key;
    p.recipe.chat_template = o.chat_template;
    p.recipe.train_on = o.train_on;
    p.recipe.on_bad_line = o.on_bad_line;
  }
  p.recipe.text_key = o.text_key;
  p.recipe.split_lines = o.split_lines;
  p.recipe.append_eos = o.append_eos;
  p.recipe.eval_fraction = o.eval_fraction;
  p.recipe.shard_tokens = o.shard_tokens;
  p.jobs = o.jobs;
  p.progress = !o.quiet;
  const text::PrepareResult r = text::prepare(p, enc);
  const text::PrepareManifest& m = r.manifest;
  if (r.up_to_date) {
    out << "gtrain prepare: " << o.out << " is up to date (same tokenizer, options and input bytes, key " << m.key
        << "): nothing to do" << std::endl;
    return kExitOk;
  }
  uint64_t bytes = 0;
  for (const auto& in : m.inputs) bytes += in.bytes;
  const size_t eval_shards = m.shard_files("eval").size();
  out << "gtrain prepare: " << plural(static_cast<int64_t>(m.inputs.size()), "input") << " ("
      << format_bytes(static_cast<double>(bytes)) << "), " << plural(m.documents, "document") << ", "
      << plural(m.tokens, "token")
      << (m.eval_documents
              ? str(" (eval: ", plural(m.eval_documents, "document"), ", ", plural(m.eval_tokens, "token"), ")")
              : std::string())
      << " -> " << o.out << ": " << plural(static_cast<int64_t>(m.shards.size() - eval_shards), "train shard") << ", "
      << plural(static_cast<int64_t>(eval_shards), "eval shard") << " of " << m.dtype << " ids; tokenizer "
      << enc.describe << std::endl;
  if (m.recipe.conversations()) {
    out << "gtrain prepare: " << m.recipe.data_format << " with the " << m.recipe.chat_template
        << " template, training on " << m.recipe.train_on << ": " << plural(m.trained_tokens, "trained token") << ", "
        << plural(m.bad_lines, "bad line") << " skipped, " << m.tools_ignored << " with tools ignored" << std::endl;
  }
  out << "gtrain prepare: "
      << strf("%.2f s, %.2f MB/s of text (%.2f MB/s of input)", r.seconds,
              static_cast<double>(r.text_bytes) / 1e6 / std::max(r.seconds, 1e-9),
              static_cast<double>(bytes) / 1e6 / std::max(r.seconds, 1e-9))
      << ", peak memory " << format_bytes(r.peak_rss) << std::endl;
  return kExitOk;
}

}  // namespace gtrain
