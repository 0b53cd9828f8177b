// text_data.cpp: the text data cache: its key, lookup, preparation and checks.
#include "runtime/core/text/text_data.h"

#include <chrono>
#include <filesystem>
#include <ostream>

#include "runtime/core/data_paths.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/text/encoder.h"
#include "runtime/core/text/prepare.h"
#include "runtime/core/text/sft_documents.h"

namespace fs = std::filesystem;

namespace gtrain::text {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// data.format = "chat" / "prompt_completion": the conversation fields of the recipe, resolved.
void conversation_recipe(const JobConfig& cfg, const Encoder& enc, PrepareOptions& o) {
  const DataConfig& d = cfg.data;
  if (d.kind != DataKind::jsonl)
    throw ConfigError(str("data.format = \"", d.format, "\" reads JSONL: data.kind is \"", d.kind, "\""),
                      "set data.kind = \"jsonl\"");
  if (!enc.tokenizer)
    throw ConfigError(str("data.tokenizer = \"", enc.path, "\": data.format = \"", d.format,
                          "\" needs a Hugging Face tokenizer (its chat template and special tokens)"),
                      "set data.tokenizer to a tokenizer.json or its model folder");
  PrepareRecipe& r = o.recipe;
  r.data_format = name_of(d.format);
  r.append_eos = false;  // the template ends each turn
  r.messages_key = d.messages_key;
  r.prompt_key = d.prompt_key;
  r.completion_key = d.completion_key;
  r.chat_template = d.chat_template;
  r.train_on = name_of(d.train_on);
  r.on_bad_line = name_of(d.on_bad_line);
  resolve_chat_recipe(r, *enc.tokenizer, "data.chat_template");
  o.template_key = "data.chat_template";
}
}  // namespace

nlohmann::json data_counts_json(const SftCounts& c, const PrepareManifest& m) {
  return {{"documents", c.documents},
          {"kept", c.kept},
          {"truncated", c.truncated},
          {"dropped_overlong", c.overlong},
          {"dropped_untrainable", c.untrainable},
          {"bad_lines_skipped", m.bad_lines},
          {"tools_ignored", m.tools_ignored},
          {"rows", c.rows},
          {"trained_tokens", c.trained},
          {"padding_fraction", c.slots > 0 ? static_cast<double>(c.padding) / static_cast<double>(c.slots) : 0.0}};
}

std::string data_counts_line(const nlohmann::json& c) {
  const auto n = [&](const char* k) { return c.value(k, int64_t{0}); };
  return str(plural(n("documents"), "conversation"), ": ", n("kept"), " kept (", n("truncated"), " truncated), ",
             n("dropped_overlong"), " dropped as overlong, ", n("dropped_untrainable"), " dropped as untrainable, ",
             plural(n("bad_lines_skipped"), "bad line"), " skipped, ", n("tools_ignored"), " with tools ignored; ",
             plural(n("rows"), "row"), ", ", plural(n("trained_tokens"), "trained token"),
             strf(", %.1f%% padding", 100.0 * c.value("padding_fraction", 0.0)));
}

std::string text_tokenizer(const JobConfig& cfg) {
  if (!cfg.data.tokenizer.empty()) return cfg.data.tokenizer;
  const std::string& init = cfg.checkpoint.init_from;
  std::error_code ec;
  if (!init.empty()) {
    const fs::path dir = fs::is_directory(init, ec) ? fs::path(init) : fs::path(init).parent_path();
    if (fs::exists(dir / "tokenizer.json", ec)) return dir.string();
  }
  throw ConfigError(str("data.tokenizer: not set, and checkpoint.init_from ",
                        init.empty() ? std::string("is not set either") : "(" + init + ") holds no tokenizer.json",
                        ": data.kind = \"", cfg.data.kind, "\" needs a tokenizer"),
                    "set data.tokenizer to a tokenizer.json or its model folder (or \"bytes\": each byte an id)");
}

std::string text_cache_root(const JobConfig& cfg, const std::string& run_dir) {
  return cfg.data.cache_dir.empty() ? (fs::path(run_dir) / "data_cache").string() : cfg.data.cache_dir;
}

TextData ensure_text_data(const JobConfig& cfg, const std::string& run_dir, std::ostream* log) {
  const double t0 = now_s();
  const std::string tokenizer = text_tokenizer(cfg);
  const Encoder enc = load_encoder(tokenizer);
  if (cfg.model.vocab > 0 && static_cast<int64_t>(enc.vocab_size) > cfg.model.vocab) {
    throw ConfigError(
        str("data.tokenizer: ", enc.path, " has ", enc.vocab_size, " ids, more than model.vocab = ", cfg.model.vocab),
        str("set model.vocab to at least ", enc.vocab_size, ", or use the model's own tokenizer"));
  }
  PrepareOptions o;
  o.inputs = expand_data_path(cfg.data.path, "data.path");
  o.recipe.format = name_of(cfg.data.kind);
  o.recipe.text_key = cfg.data.text_key;
  o.recipe.append_eos = enc.eos.has_value();
  o.recipe.eval_fraction = cfg.data.eval_fraction;
  o.recipe.shard_tokens = kDefaultShardTokens;
  if (cfg.data.format != DataFormat::text) conversation_recipe(cfg, enc, o);
  o.hashed = hash_inputs(o.inputs, o.recipe.format);
  const std::string key = prepare_key(enc.hash, o.recipe, o.hashed);
  TextData td;
  td.dir = (fs::path(text_cache_root(cfg, run_dir)) / key).string();
  o.out = td.dir;
  o.progress = log != nullptr;
  o.warn = log != nullptr;
  o.what = "gtrain: data";
  std::error_code ec;
  if (fs::exists(fs::path(td.dir) / kPrepareManifestFile, ec)) {
    td.manifest = read_prepare_manifest(td.dir);
    if (td.manifest.key != key) throw DataError(td.dir + ": its manifest's key is " + td.manifest.key + ", not " + key);
    verify_shards(td.dir, td.manifest);
  } else {
    td.manifest = prepare(o, enc).manifest;
    td.prepared = true;
  }
  td.seconds = now_s() - t0;
  if (log) {
    const PrepareManifest& m = td.manifest;
    *log << "gtrain: data: " << plural(static_cast<int64_t>(m.inputs.size()), "source") << ", "
         << plural(m.documents, "document") << ", " << plural(m.tokens, "token") << " ("
         << plural(m.eval_tokens, "eval token") << ") with " << enc.describe << ": "
         << (td.prepared ? "prepared into " : "prepared before, shards checked, in ") << td.dir
         << strf(" (%.1f s)", td.seconds) << std::endl;
  }
  if (td.manifest.recipe.conversations() && cfg.model.seq_len > 0) {
    SftOptions so;
    so.seq_len = cfg.model.seq_len;
    so.packing = cfg.data.packing;
    so.overlong = cfg.data.overlong == DataOverlong::drop ? Overlong::drop : Overlong::truncate;
    td.counts = data_counts_json(open_sft_data(td.dir, "train", so)->counts(), td.manifest);
    if (log) *log << "gtrain: data: " << data_counts_line(td.counts) << std::endl;
  }
  return td;
}

TextData text_data_for_rank(const JobConfig& cfg, const std::string& run_dir,
                            const std::map<std::string, std::string>& env) {
  const auto dir = env.find(kEnvTextData);
  std::error_code ec;
  // Not handed over, or a folder this host does not see (data.cache_dir on a node's own disk): this
  // host prepares its own copy (the ranks on it that race write the same bytes; one copy stays).
  if (dir == env.end() || dir->second.empty() || !fs::exists(fs::path(dir->second) / kPrepareManifestFile, ec))
    return ensure_text_data(cfg, run_dir, nullptr);
  TextData td;
  td.dir = dir->second;
  td.manifest = read_prepare_manifest(td.dir);
  const auto s = env.find(kEnvPrepareSeconds);
  if (s != env.end()) td.seconds = std::atof(s->second.c_str());
  const auto c = env.find(kEnvDataCounts);
  if (c != env.end() && !c->second.empty()) td.counts = nlohmann::json::parse(c->second, nullptr, false);
  if (td.counts.is_discarded()) td.counts = nullptr;
  return td;
}

}  // namespace gtrain::text
