// prepare_manifest.cpp: the manifest to and from JSON, its key, and the shards checked against it.
#include "runtime/core/text/prepare_manifest.h"

#include <filesystem>
#include <fstream>

#include "runtime/core/errors.h"
#include "runtime/core/fnv.h"
#include "runtime/core/format.h"
#include "runtime/core/text/byte_stream.h"

namespace gtrain::text {

namespace {
template <class T>
T field(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto it = j.find(name);
  if (it == j.end()) throw DataError(where + ": no \"" + name + "\"", "prepare the data again (gtrain prepare)");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw DataError(where + ": \"" + name + "\" has the wrong type", "prepare the data again (gtrain prepare)");
  }
}

}  // namespace

template <class T>
T optional_field(const nlohmann::json& j, const char* name, const T& otherwise, const std::string& where) {
  return j.contains(name) ? field<T>(j, name, where) : otherwise;
}

nlohmann::json PrepareRecipe::to_json() const {
  nlohmann::json j = {{"format", format},         {"text_key", text_key},           {"split_lines", split_lines},
                      {"append_eos", append_eos}, {"eval_fraction", eval_fraction}, {"shard_tokens", shard_tokens}};
  if (conversations()) {
    j["data_format"] = data_format;
    j["messages_key"] = messages_key;
    j["prompt_key"] = prompt_key;
    j["completion_key"] = completion_key;
    j["chat_template"] = chat_template;
    j["chat_system"] = chat_system;
    j["train_on"] = train_on;
    j["on_bad_line"] = on_bad_line;
  }
  return j;
}

PrepareRecipe PrepareRecipe::from_json(const nlohmann::json& j) {
  PrepareRecipe r;
  const std::string w = "recipe";
  r.format = field<std::string>(j, "format", w);
  r.text_key = field<std::string>(j, "text_key", w);
  r.split_lines = field<bool>(j, "split_lines", w);
  r.append_eos = field<bool>(j, "append_eos", w);
  r.eval_fraction = field<double>(j, "eval_fraction", w);
  r.shard_tokens = field<int64_t>(j, "shard_tokens", w);
  r.data_format = optional_field<std::string>(j, "data_format", "text", w);
  r.messages_key = optional_field<std::string>(j, "messages_key", r.messages_key, w);
  r.prompt_key = optional_field<std::string>(j, "prompt_key", r.prompt_key, w);
  r.completion_key = optional_field<std::string>(j, "completion_key", r.completion_key, w);
  r.chat_template = optional_field<std::string>(j, "chat_template", r.chat_template, w);
  r.chat_system = optional_field<std::string>(j, "chat_system", r.chat_system, w);
  r.train_on = optional_field<std::string>(j, "train_on", r.train_on, w);
  r.on_bad_line = optional_field<std::string>(j, "on_bad_line", r.on_bad_line, w);
  return r;
}

nlohmann::json PrepareManifest::to_json() const {
  nlohmann::json in = nlohmann::json::array(), sh = nlohmann::json::array();
  for (const auto& i : inputs)
    in.push_back({{"path", i.path}, {"format", i.format}, {"bytes", i.bytes}, {"crc32c", i.crc}});
  for (const auto& s : shards) {
    sh.push_back({{"file", s.file}, {"split", s.split}, {"tokens", s.tokens}, {"crc32c", s.crc}});
    if (!s.mask_crc.empty()) sh.back()["mask_crc32c"] = s.mask_crc;
  }
  nlohmann::json j = {{"version", version},
                      {"key", key},
                      {"tokenizer", {{"path", tokenizer}, {"hash", tokenizer_hash}, {"vocab_size", vocab_size}}},
                      {"dtype", dtype},
                      {"recipe", recipe.to_json()},
                      {"inputs", in},
                      {"documents", documents},
                      {"tokens", tokens},
                      {"eval_documents", eval_documents},
                      {"eval_tokens", eval_tokens},
                      {"shards", sh},
                      {"seconds", seconds}};
  if (recipe.conversations()) {
    nlohmann::json docs = nlohmann::json::array();
    for (const auto& d : doc_indexes)
      docs.push_back({{"file", d.file}, {"split", d.split}, {"documents", d.documents}, {"crc32c", d.crc}});
    j["conversations"] = {{"doc_indexes", docs},
                          {"eos_id", eos_id},
                          {"trained_tokens", trained_tokens},
                          {"bad_lines", bad_lines},
                          {"tools_ignored", tools_ignored}};
  }
  return j;
}

PrepareManifest PrepareManifest::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw DataError(where + ": not a JSON object", "prepare the data again (gtrain prepare)");
  PrepareManifest m;
  m.version = field<int>(j, "version", where);
  if (m.version != 1) throw DataError(str(where, ": version ", m.version, ", this gtrain reads version 1"));
  m.key = field<std::string>(j, "key", where);
  const auto tok = field<nlohmann::json>(j, "tokenizer", where);
  m.tokenizer = field<std::string>(tok, "path", where);
  m.tokenizer_hash = field<std::string>(tok, "hash", where);
  m.vocab_size = field<int64_t>(tok, "vocab_size", where);
  m.dtype = field<std::string>(j, "dtype", where);
  m.recipe = PrepareRecipe::from_json(field<nlohmann::json>(j, "recipe", where));
  for (const auto& i : field<nlohmann::json>(j, "inputs", where))
    m.inputs.push_back({field<std::string>(i, "path", where), field<std::string>(i, "format", where),
                        field<uint64_t>(i, "bytes", where), field<std::string>(i, "crc32c", where)});
  m.documents = field<int64_t>(j, "documents", where);
  m.tokens = field<int64_t>(j, "tokens", where);
  m.eval_documents = field<int64_t>(j, "eval_documents", where);
  m.eval_tokens = field<int64_t>(j, "eval_tokens", where);
  for (const auto& s : field<nlohmann::json>(j, "shards", where))
    m.shards.push_back({field<std::string>(s, "file", where), field<std::string>(s, "split", where),
                        field<int64_t>(s, "tokens", where), field<std::string>(s, "crc32c", where),
                        optional_field<std::string>(s, "mask_crc32c", "", where)});
  m.seconds = field<double>(j, "seconds", where);
  if (m.recipe.conversations()) {
    const auto c = field<nlohmann::json>(j, "conversations", where);
    for (const auto& d : field<nlohmann::json>(c, "doc_indexes", where))
      m.doc_indexes.push_back({field<std::string>(d, "file", where), field<std::string>(d, "split", where),
                               field<int64_t>(d, "documents", where), field<std::string>(d, "crc32c", where)});
    m.eos_id = field<int64_t>(c, "eos_id", where);
    m.trained_tokens = field<int64_t>(c, "trained_tokens", where);
    m.bad_lines = field<int64_t>(c, "bad_lines", where);
    m.tools_ignored = field<int64_t>(c, "tools_ignored", where);
  }
  return m;
}

std::vector<std::string> PrepareManifest::shard_files(const std::string& split) const {
  std::vector<std::string> out;
  for (const auto& s : shards)
    if (s.split == split) out.push_back(s.file);
  return out;
}

std::string mask_file(const std::string& shard_file) {
  const size_t dot = shard_file.rfind(".bin");
  return (dot == std::string::npos ? shard_file : shard_file.substr(0, dot)) + ".mask";
}

std::string prepare_key(const std::string& tokenizer_hash, const PrepareRecipe& recipe,
                        const std::vector<PreparedInput>& inputs) {
  Fnv1a h;
  h.field("gtrain-prepare-1").field(tokenizer_hash).field(recipe.to_json().dump());
  for (const auto& i : inputs) h.field(str(i.format, " ", i.bytes, " ", i.crc));
  return h.hex();
}

PrepareManifest read_prepare_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kPrepareManifestFile).string();
  std::ifstream f(path);
  if (!f) throw DataError(path + ": missing (not a folder gtrain prepare finished)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path + ": not JSON (" + e.what() + ")", "prepare the data again (gtrain prepare)");
  }
  return PrepareManifest::from_json(j, path);
}

namespace {
// A side file of a conversations' preparation: present, `bytes` long, its CRC-32C `crc`.
void verify_file(const std::string& dir, const std::string& file, uint64_t bytes, const std::string& want,
                 const std::string& hint) {
  const std::string path = (std::filesystem::path(dir) / file).string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw DataError(path + ": missing; " + kPrepareManifestFile + " lists it", hint);
  if (size != bytes) throw DataError(str(path, ": ", size, " bytes, ", kPrepareManifestFile, " says ", bytes), hint);
  const std::string crc = file_crc32c(path);
  if (crc != want)
    throw DataError(str(path, ": CRC-32C ", crc, ", ", kPrepareManifestFile, " says ", want, " (a damaged file)"),
                    hint);
}
}  // namespace

void verify_shards(const std::string& dir, const PrepareManifest& m) {
  const int width = m.dtype == "uint32" ? 4 : 2;
  const std::string hint = "prepare the data again: delete " + dir + " (a data cache is rebuilt on the next run)";
  for (const auto& s : m.shards) {
    const std::string path = (std::filesystem::path(dir) / s.file).string();
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const uint64_t want = 1024 + static_cast<uint64_t>(s.tokens) * width;
    if (ec) throw DataError(path + ": missing; " + kPrepareManifestFile + " lists it", hint);
    if (size != want) throw DataError(str(path, ": ", size, " bytes, ", kPrepareManifestFile, " says ", want), hint);
    const std::string crc = file_crc32c(path);
    if (crc != s.crc)
      throw DataError(str(path, ": CRC-32C ", crc, ", ", kPrepareManifestFile, " says ", s.crc, " (a damaged shard)"),
                      hint);
    if (m.recipe.conversations())
      verify_file(dir, mask_file(s.file), static_cast<uint64_t>(s.tokens), s.mask_crc, hint);
  }
  for (const auto& d : m.doc_indexes) verify_file(dir, d.file, 8 * static_cast<uint64_t>(d.documents + 1), d.crc, hint);
}

}  // namespace gtrain::text
