// data_config.h: the [data] section: which dataset reader, where its files are, and prefetching.
#pragma once

#include <cstdint>
#include <string>

#include <array>

#include "runtime/core/config/enum_names.h"
#include "runtime/core/config/schema.h"

namespace gtrain {

// data.kind: which dataset reader opens data.path.
enum class DataKind { idx, tokens, text_bytes, synthetic };
constexpr std::array<EnumName<DataKind>, 4> enum_names(DataKind) {
  return {{{DataKind::idx, "idx"},
           {DataKind::tokens, "tokens"},
           {DataKind::text_bytes, "text_bytes"},
           {DataKind::synthetic, "synthetic"}}};
}
// Whether the kind reads a token file (tokens, text_bytes): data a token count applies to.
constexpr bool is_token_file(DataKind kind) {
  return kind == DataKind::tokens || kind == DataKind::text_bytes;
}

struct DataConfig {
  DataKind kind = DataKind::idx;                           // idx | tokens | text_bytes | synthetic
  std::string path = "/usr/share/datasets/fashion-mnist";  // idx: directory; tokens/text_bytes: file or glob
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

  template <class V>
  void visit(V& v) {
    v("kind", kind,
      "Dataset reader: \"idx\" (MNIST/Fashion-MNIST files), \"tokens\" (flat binary token file), "
      "\"text_bytes\" (byte-level LM on any file), \"synthetic\" (deterministic, for tests and benchmarks).");
    v("path", path,
      "idx: directory of the IDX files (gzipped or not); tokens/text_bytes: the file, or a glob of shards "
      "(\"fineweb_train_*.bin\", taken in sorted order; a window never spans two files). Token files are "
      "memory-mapped: the ranks on a host share one copy through the page cache.");
    v("eval_path", eval_path,
      "tokens/text_bytes: held-out file or glob (llm.c's \"fineweb_val_*.bin\"); \"\" = hold out "
      "data.eval_fraction at the end of data.path instead.");
    v("train_prefix", train_prefix, "idx: file prefix of the training split (<prefix>-images-idx3-ubyte[.gz]).");
    v("eval_prefix", eval_prefix, "idx: file prefix of the held-out split (\"\" = no eval).");
    v("token_dtype", token_dtype,
      "tokens: element type of the token files. A file starting with llm.c's shard header (magic 20240520) "
      "is read past its header, which must agree.",
      cfg::one_of({"uint16", "uint32"}));
    v("eval_fraction", eval_fraction,
      "tokens/text_bytes: fraction at the end of data.path's tokens held out for eval (ignored with data.eval_path).",
      cfg::range(0.0, 0.5));
    v("synthetic_samples", synthetic_samples,
      "synthetic: number of training samples (at most 1e8); eval gets a quarter as many.", cfg::range(1, 1e8));
    v("synthetic_features", synthetic_features, "synthetic: input features of the classification task.",
      cfg::at_least(1));
    v("synthetic_classes", synthetic_classes, "synthetic: classes of the classification task.", cfg::at_least(2));
    v("prefetch", prefetch, "Micro-batches prepared ahead of the trainer by background threads.", cfg::at_least(1));
    v("workers", workers, "Background threads that prepare batches.", cfg::range(1, 64));
  }
};

}  // namespace gtrain
