// data_config.h: the [data] section: which dataset reader, where its files are, and prefetching.
#pragma once

#include <cstdint>
#include <string>

#include <array>

#include "runtime/core/config/enum_names.h"
#include "runtime/core/config/schema.h"

namespace gtrain {

// data.kind: which dataset reader opens data.path.
enum class DataKind { idx, tokens, text_bytes, synthetic, text, jsonl };
constexpr std::array<EnumName<DataKind>, 6> enum_names(DataKind) {
  return {{{DataKind::idx, "idx"},
           {DataKind::tokens, "tokens"},
           {DataKind::text_bytes, "text_bytes"},
           {DataKind::synthetic, "synthetic"},
           {DataKind::text, "text"},
           {DataKind::jsonl, "jsonl"}}};
}
// Whether the kind is text the launcher tokenizes into cached token shards first (text, jsonl).
constexpr bool is_text(DataKind kind) {
  return kind == DataKind::text || kind == DataKind::jsonl;
}
// Whether the kind reads token windows from files (tokens, text_bytes, text, jsonl): data a token
// count applies to.
constexpr bool is_token_file(DataKind kind) {
  return kind == DataKind::tokens || kind == DataKind::text_bytes || is_text(kind);
}

// data.format: what each JSONL line of data.kind = "jsonl" holds.
enum class DataFormat { text, chat, prompt_completion };
constexpr std::array<EnumName<DataFormat>, 3> enum_names(DataFormat) {
  return {
      {{DataFormat::text, "text"}, {DataFormat::chat, "chat"}, {DataFormat::prompt_completion, "prompt_completion"}}};
}
// data.train_on: the tokens of a conversation the loss counts.
enum class DataTrainOn { assistant, all, last_assistant };
constexpr std::array<EnumName<DataTrainOn>, 3> enum_names(DataTrainOn) {
  return {{{DataTrainOn::assistant, "assistant"},
           {DataTrainOn::all, "all"},
           {DataTrainOn::last_assistant, "last_assistant"}}};
}
// data.overlong: what a conversation longer than model.seq_len becomes.
enum class DataOverlong { truncate, drop };
constexpr std::array<EnumName<DataOverlong>, 2> enum_names(DataOverlong) {
  return {{{DataOverlong::truncate, "truncate"}, {DataOverlong::drop, "drop"}}};
}
// data.on_bad_line: a conversation line that cannot be read.
enum class DataBadLine { error, skip };
constexpr std::array<EnumName<DataBadLine>, 2> enum_names(DataBadLine) {
  return {{{DataBadLine::error, "error"}, {DataBadLine::skip, "skip"}}};
}

struct DataConfig {
  DataKind kind = DataKind::idx;                           // idx | tokens | text_bytes | synthetic | text | jsonl
  std::string path = "/usr/share/datasets/fashion-mnist";  // idx: directory; else: file or glob
  std::string eval_path = "";                              // tokens/text_bytes: held-out file or glob ("" = tail)
  std::string train_prefix = "train";                      // idx: <prefix>-images-idx3-ubyte[.gz] for training
  std::string eval_prefix = "t10k";                        // idx: held-out split ("" = none)
  std::string token_dtype = "uint16";                      // tokens: element type of the flat binary file
  double eval_fraction = 0.1;                              // tokens/text_bytes: tail of the file held out for eval
  int64_t synthetic_samples = 16384;                       // synthetic: training samples (eval gets a quarter)
  int64_t synthetic_features = 32;                         // synthetic: input features (classification task)
  int64_t synthetic_classes = 10;                          // synthetic: classes (classification task)
  int64_t prefetch = 4;                                    // micro-batches prepared ahead of the trainer
  int64_t workers = 1;                                     // background threads preparing batches
  std::string tokenizer = "";                      // text/jsonl: tokenizer.json or its folder ("" = init_from's)
  std::string text_key = "text";                   // jsonl: the key holding each line's text
  std::string cache_dir = "";                      // text/jsonl: prepared shards' root ("" = run dir)
  DataFormat format = DataFormat::text;            // jsonl: text | chat | prompt_completion
  std::string messages_key = "messages";           // chat: the key holding each line's messages
  std::string prompt_key = "prompt";               // prompt_completion: the prompt's key
  std::string completion_key = "completion";       // prompt_completion: the completion's key
  std::string chat_template = "";                  // chat: llama3 | chatml | qwen3 | plain ("" = the tokenizer's)
  DataTrainOn train_on = DataTrainOn::assistant;   // chat: the tokens the loss counts
  DataOverlong overlong = DataOverlong::truncate;  // chat: a conversation longer than a row
  bool packing = true;                             // chat: several conversations a row
  DataBadLine on_bad_line = DataBadLine::error;    // chat: a line that cannot be read
  // Not a key: the folder of prepared shards data.kind = text / jsonl reads, found or made at start.
  std::string prepared_dir = "";

  template <class V>
  void visit(V& v) {
    v("kind", kind,
      "Dataset reader: \"idx\" (MNIST/Fashion-MNIST files), \"tokens\" (flat binary token file), "
      "\"text_bytes\" (byte-level LM on any file), \"synthetic\" (deterministic, for tests and benchmarks), "
      "\"text\" / \"jsonl\" (text or JSONL files, plain, .gz or .zst, tokenized with data.tokenizer into cached "
      "token shards before the ranks start: docs/data-preparation.md).");
    v("path", path,
      "idx: directory of the IDX files (gzipped or not); tokens/text_bytes: the file, or a glob of shards "
      "(\"fineweb_train_*.bin\", taken in sorted order; a window never spans two files), or a Megatron-LM "
      "prefix (PREFIX.bin with PREFIX.idx). Token files are memory-mapped: the ranks on a host share one copy "
      "through the page cache. text/jsonl: the source file or glob.");
    v("eval_path", eval_path,
      "tokens/text_bytes: held-out file or glob (llm.c's \"fineweb_val_*.bin\"); \"\" = hold out "
      "data.eval_fraction at the end of data.path instead.");
    v("train_prefix", train_prefix, "idx: file prefix of the training split (<prefix>-images-idx3-ubyte[.gz]).");
    v("eval_prefix", eval_prefix, "idx: file prefix of the held-out split (\"\" = no eval).");
    v("token_dtype", token_dtype,
      "tokens: element type of the token files. A file starting with llm.c's shard header (magic 20240520, or "
      "20240801 for Llama 3) is read past its header, which must agree; a Megatron .bin takes its .idx's.",
      cfg::one_of({"uint16", "uint32"}));
    v("eval_fraction", eval_fraction,
      "tokens/text_bytes: fraction at the end of data.path's tokens held out for eval (ignored with data.eval_path); "
      "text/jsonl: fraction of the documents (every 1/F-th) prepared into eval shards.",
      cfg::range(0.0, 0.5));
    v("synthetic_samples", synthetic_samples,
      "synthetic: number of training samples (at most 1e8); eval gets a quarter as many.", cfg::range(1, 1e8));
    v("synthetic_features", synthetic_features, "synthetic: input features of the classification task.",
      cfg::at_least(1));
    v("synthetic_classes", synthetic_classes, "synthetic: classes of the classification task.", cfg::at_least(2));
    v("prefetch", prefetch, "Micro-batches prepared ahead of the trainer by background threads.", cfg::at_least(1));
    v("workers", workers, "Background threads that prepare batches.", cfg::range(1, 64));
    v("tokenizer", tokenizer,
      "text/jsonl: a Hugging Face tokenizer.json, the model folder holding it, or \"bytes\" (each byte an id); "
      "\"\" = checkpoint.init_from's folder when it holds a tokenizer.json.");
    v("text_key", text_key, "jsonl: the key of each line's object that holds the document's text.");
    v("cache_dir", cache_dir,
      "text/jsonl: folder of prepared token shards, one subfolder per tokenizer and sources (by their hashes), "
      "shared by the runs that name it; \"\" = data_cache/ in the run directory.");
    v("format", format,
      "jsonl: what each line holds: \"text\" (a document under data.text_key), \"chat\" (a conversation under "
      "data.messages_key) or \"prompt_completion\" (data.prompt_key and data.completion_key): fine-tuning with a "
      "loss mask, docs/data-preparation.md#chat-and-promptcompletion-data.");
    v("messages_key", messages_key,
      "chat: the key of each line's object holding its list of {role, content} messages.");
    v("prompt_key", prompt_key, "prompt_completion: the key holding the prompt (a string, or a list of messages).");
    v("completion_key", completion_key,
      "prompt_completion: the key holding the completion the loss trains on (a string, or a list of messages).");
    v("chat_template", chat_template,
      "chat / prompt_completion: \"llama3\", \"chatml\", \"qwen3\" or \"plain\" (each turn then the EOS); \"\" = "
      "the template data.tokenizer's tokenizer_config.json carries, recognised by content.",
      cfg::one_of({"", "llama3", "chatml", "qwen3", "plain"}));
    v("train_on", train_on,
      "chat / prompt_completion: the tokens the loss counts: \"assistant\" (each assistant turn and its "
      "end-of-turn token; a prompt_completion's completion), \"all\" or \"last_assistant\" (the last turn only).");
    v("overlong", overlong,
      "chat / prompt_completion: a conversation of more than model.seq_len slots is cut to fit (\"truncate\") or "
      "left out (\"drop\"); either is counted in the start-up line and the ledger.");
    v("packing", packing,
      "chat / prompt_completion: conversations packed into model.seq_len rows by best fit, attention and positions "
      "restarting at each (false: one a row, padded to the micro-batch's longest).");
    v("on_bad_line", on_bad_line,
      "chat / prompt_completion: a line that is not a readable conversation stops the preparation naming its file "
      "and line (\"error\"), or is left out and counted (\"skip\").");
  }
};

}  // namespace gtrain
