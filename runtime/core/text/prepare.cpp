// prepare.cpp: the pipeline: the main thread reads documents into chunks, worker threads take
// their text out and encode it, one writer appends the chunks' ids in reading order to the shards.
// At most a few chunks per thread are in flight, so memory does not grow with the input.
#include "runtime/core/text/prepare.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/startup.h"
#include "runtime/core/text/documents.h"
#include "runtime/core/text/sft_documents.h"
#include "runtime/core/text/shard_writer.h"

namespace fs = std::filesystem;

namespace gtrain::text {

namespace {

constexpr size_t kChunkBytes = 256 << 10;  // text per chunk, about
constexpr size_t kChunkDocs = 4096;

struct Chunk {
  uint64_t seq = 0;
  std::vector<RawDocument> docs;
  uint64_t raw_end = 0;          // input bytes read when the chunk was cut (progress)
  std::exception_ptr error;      // set by the reader (its input failed) or a worker (a bad line)
  std::vector<uint32_t> ids;     // the documents' ids, end to end
  std::vector<uint32_t> counts;  // ids per document
  uint64_t text_bytes = 0;       // the documents' text
  // Conversations:
  std::vector<uint8_t> train;          // the ids' mask, end to end
  int64_t bad_lines = 0, tools = 0;    // lines skipped, lines with "tools"
  std::string first_bad, first_tools;  // the first of each, for the warning
};
using ChunkPtr = std::shared_ptr<Chunk>;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The state the reader, the workers and the writer share.
struct Pipeline {
  std::mutex m;
  std::condition_variable cv;
  std::deque<ChunkPtr> todo;
  std::map<uint64_t, ChunkPtr> encoded;
  size_t in_flight = 0, max_in_flight = 4;
  bool reading_done = false, stop = false;
  uint64_t chunks = 0;  // made by the reader
};

// Conversations: each line's ids and mask; a bad line skipped and counted, or the chunk's error.
void encode_conversations(Chunk& c, const PrepareOptions& o, const std::vector<PreparedInput>& inputs,
                          const ConversationEncoder& conv) {
  for (const auto& d : c.docs) {
    const std::string& path = inputs[d.input].path;
    try {
      bool tools = false;
      const EncodedChat e = conv.encode(d, path, &tools);
      c.text_bytes += d.bytes.size();
      c.ids.insert(c.ids.end(), e.ids.begin(), e.ids.end());
      c.train.insert(c.train.end(), e.train.begin(), e.train.end());
      c.counts.push_back(static_cast<uint32_t>(e.ids.size()));
      if (tools && c.tools++ == 0) c.first_tools = str(path, ":", d.line);
    } catch (const BadLineError& e) {
      if (o.recipe.on_bad_line != "skip") throw;
      if (c.bad_lines++ == 0) c.first_bad = e.what();
    }
  }
}

void encode_chunk(Chunk& c, const PrepareOptions& o, const std::vector<PreparedInput>& inputs, const Encoder& enc,
                  const ConversationEncoder* conv) {
  std::string text;
  try {
    if (conv) encode_conversations(c, o, inputs, *conv);
    for (size_t k = 0; k < (conv ? 0 : c.docs.size()); ++k) {
      const RawDocument& d = c.docs[k];
      const PreparedInput& in = inputs[d.input];
      text_of(d, in.path, in.format == "jsonl" ? InputFormat::jsonl : InputFormat::text, o.recipe.text_key, text);
      const size_t before = c.ids.size();
      c.text_bytes += text.size();
      enc.encode(text, c.ids);
      if (o.recipe.append_eos) c.ids.push_back(*enc.eos);
      c.counts.push_back(static_cast<uint32_t>(c.ids.size() - before));
    }
  } catch (...) {
    c.error = std::current_exception();
  }
  c.docs.clear();
  c.docs.shrink_to_fit();
}

void worker(Pipeline& p, const PrepareOptions& o, const std::vector<PreparedInput>& inputs, const Encoder& enc,
            const ConversationEncoder* conv) {
  while (true) {
    ChunkPtr c;
    {
      std::unique_lock<std::mutex> lock(p.m);
      p.cv.wait(lock, [&] { return p.stop || !p.todo.empty() || p.reading_done; });
      if (p.stop || (p.todo.empty() && p.reading_done)) return;
      c = p.todo.front();
      p.todo.pop_front();
    }
    if (!c->error) encode_chunk(*c, o, inputs, enc, conv);
    std::lock_guard<std::mutex> lock(p.m);
    p.encoded[c->seq] = c;
    p.cv.notify_all();
  }
}

// The progress line: in place on a terminal, else a line every 10 s.
class Progress {
 public:
  Progress(bool on, uint64_t total, std::string what)
      : on_(on), tty_(isatty(2)), total_(total), what_(std::move(what)), start_(now_s()), shown_(start_) {}
  void update(uint64_t done, int64_t docs, int64_t tokens, bool last = false) {
    if (!on_) return;
    const double t = now_s();
    if (!last && t - shown_ < (tty_ ? 0.5 : 10.0)) return;
    shown_ = t;
    const double rate = done / std::max(1e-9, t - start_);
    const double eta = rate > 0 ? (static_cast<double>(total_) - done) / rate : -1;
    std::cerr << (tty_ ? "\r" : "")
              << strf("%s: %3.0f%% of %s, %.1f MB/s, ETA %s, %s, %s", what_.c_str(),
                      total_ ? 100.0 * done / total_ : 100.0, format_bytes(static_cast<double>(total_)).c_str(),
                      rate / 1e6, format_eta(last ? 0 : eta).c_str(), plural(docs, "document").c_str(),
                      plural(tokens, "token").c_str())
              << (tty_ ? "\x1b[K" : "\n") << std::flush;
    if (tty_ && last) std::cerr << "\n";
  }

 private:
  bool on_, tty_;
  uint64_t total_;
  std::string what_;
  double start_, shown_;
};

// The writer: chunks in reading order into the train and eval shards; stops at the first error.
struct Writer {
  Writer(const std::string& dir, const PrepareOptions& o, const Encoder& enc)
      : o_(o),
        conversations_(o.recipe.conversations()),
        train_(dir, "train", enc.vocab_size, o.recipe.shard_tokens, conversations_),
        eval_(dir, "eval", enc.vocab_size, o.recipe.shard_tokens, conversations_) {
    if (conversations_) {
      train_docs_ = std::make_unique<DocIndexWriter>(dir, "train");
      eval_docs_ = std::make_unique<DocIndexWriter>(dir, "eval");
    }
  }

  void run(Pipeline& p, Progress& progress) {
    for (uint64_t seq = 0;; ++seq) {
      ChunkPtr c;
      {
        std::unique_lock<std::mutex> lock(p.m);
        p.cv.wait(lock, [&] { return p.encoded.count(seq) || (p.reading_done && seq >= p.chunks); });
        if (!p.encoded.count(seq)) return;
        c = p.encoded[seq];
        p.encoded.erase(seq);
      }
      if (c->error) {
        error = c->error;
        std::lock_guard<std::mutex> lock(p.m);
        p.stop = true;
        p.cv.notify_all();
        return;
      }
      write(*c);
      progress.update(c->raw_end, m.documents, m.tokens);
      std::lock_guard<std::mutex> lock(p.m);
      --p.in_flight;
      p.cv.notify_all();
    }
  }

  void write(const Chunk& c) {
    text_bytes += c.text_bytes;
    warn(c);
    size_t at = 0;
    for (uint32_t n : c.counts) {
      const bool eval = eval_document(m.documents, o_.recipe.eval_fraction);
      (eval ? eval_ : train_).append(c.ids.data() + at, n, conversations_ ? c.train.data() + at : nullptr);
      if (conversations_) {
        (eval ? eval_docs_ : train_docs_)->add(n);
        for (size_t i = at; i < at + n; ++i) m.trained_tokens += c.train[i];
      }
      at += n;
      ++m.documents;
      m.tokens += n;
      if (eval) ++m.eval_documents, m.eval_tokens += n;
    }
  }

  // The first line with "tools", and the first bad line skipped, said once a preparation.
  void warn(const Chunk& c) {
    if (o_.warn && c.tools > 0 && m.tools_ignored == 0)
      std::cerr << o_.what << ": warning: " << c.first_tools
                << ": \"tools\" ignored (gtrain's chat templates write no tool definitions); further lines "
                   "with tools are counted"
                << std::endl;
    if (o_.warn && c.bad_lines > 0 && m.bad_lines == 0)
      std::cerr << o_.what << ": warning: " << c.first_bad << "; line skipped, further ones counted" << std::endl;
    m.tools_ignored += c.tools;
    m.bad_lines += c.bad_lines;
  }

  const PrepareOptions& o_;
  bool conversations_;
  ShardWriter train_, eval_;
  std::unique_ptr<DocIndexWriter> train_docs_, eval_docs_;
  PrepareManifest m;
  uint64_t text_bytes = 0;
  std::exception_ptr error;
};

// Reads every input into chunks for the workers; an input that fails ends the reading with a
// chunk carrying its error, so errors surface in reading order.
void read_all(Pipeline& p, const PrepareOptions& o, const std::vector<PreparedInput>& inputs) {
  auto c = std::make_shared<Chunk>();
  size_t bytes = 0;
  uint64_t raw_before = 0;
  auto push = [&](bool last) {
    std::unique_lock<std::mutex> lock(p.m);
    if (!c->docs.empty() || c->error) {
      p.cv.wait(lock, [&] { return p.stop || p.in_flight < p.max_in_flight; });
      c->seq = p.chunks++;
      ++p.in_flight;
      p.todo.push_back(c);
      c = std::make_shared<Chunk>();
      bytes = 0;
    }
    if (last) p.reading_done = true;
    p.cv.notify_all();
  };
  for (uint32_t i = 0; i < inputs.size(); ++i) {
    try {
      DocumentReader r(inputs[i].path, i, inputs[i].format == "jsonl" ? InputFormat::jsonl : InputFormat::text,
                       o.recipe.split_lines);
      RawDocument d;
      while (r.next(d)) {
        bytes += d.bytes.size();
        c->docs.push_back(std::move(d));
        c->raw_end = raw_before + r.raw_read();
        if (bytes >= kChunkBytes || c->docs.size() >= kChunkDocs) push(false);
        if (p.stop) break;
      }
    } catch (...) {
      push(false);  // the documents before the failure keep their place
      c->error = std::current_exception();
      push(true);
      return;
    }
    raw_before += inputs[i].bytes;
    if (p.stop) break;
  }
  push(true);
}

// A temporary folder beside `out`, removed unless committed; stale ones of dead processes are removed first.
class StagingDir {
 public:
  explicit StagingDir(const fs::path& out) : out_(out) {
    const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
    fs::create_directories(parent);
    const std::string stem = "." + out.filename().string() + ".tmp-";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(parent, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(stem, 0) != 0) continue;
      const long pid = std::atol(name.c_str() + stem.size());
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
    }
    dir_ = parent / (stem + std::to_string(::getpid()));
    fs::remove_all(dir_, ec);
    fs::create_directories(dir_);
  }
  ~StagingDir() {
    std::error_code ec;
    if (!committed_) fs::remove_all(dir_, ec);
  }
  const fs::path& path() const { return dir_; }
  // Renames the staging folder to `out`, replacing a previous preparation there.
  void commit() {
    std::error_code ec;
    fs::rename(dir_, out_, ec);  // atomic while nothing (or an empty folder) is there
    if (!ec) {
      committed_ = true;
      return;
    }
    fs::path old;
    if (fs::exists(out_)) {
      old = out_.parent_path() / ("." + out_.filename().string() + ".old-" + std::to_string(::getpid()));
      fs::remove_all(old, ec);
      fs::rename(out_, old);
    }
    fs::rename(dir_, out_);
    committed_ = true;
    if (!old.empty()) fs::remove_all(old, ec);
  }

 private:
  fs::path out_, dir_;
  bool committed_ = false;
};

void write_manifest(const fs::path& dir, const PrepareManifest& m) {
  const fs::path path = dir / kPrepareManifestFile;
  std::ofstream f(path);
  f << m.to_json().dump(2) << "\n";
  f.close();
  if (!f) throw Error(path.string() + ": cannot write", "check that the disk is not full");
}

// An existing output folder that is not gtrain prepare's is not replaced.
void check_replaceable(const fs::path& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec))
    throw ConfigError(out.string() + ": exists and is not a folder", "choose another --out");
  if (fs::exists(out / kPrepareManifestFile, ec) || fs::is_empty(out, ec)) return;
  throw ConfigError(out.string() + ": a folder gtrain prepare did not write (no " + kPrepareManifestFile + ")",
                    "choose another --out, or empty it");
}

// Whether `out` holds a finished preparation of `key`: then `r` is it, up to date.
bool prepared_as(const fs::path& out, std::string key, PrepareResult& r) {
  std::error_code ec;
  if (!fs::exists(out / kPrepareManifestFile, ec)) return false;
  try {
    PrepareManifest old = read_prepare_manifest(out.string());
    if (old.key != key) return false;
    r.manifest = old;
    r.up_to_date = true;
    return true;
  } catch (const DataError&) {  // a damaged manifest: prepared again
    return false;
  }
}

// A conversations' recipe: read as JSONL, with a Hugging Face tokenizer, the template writing the ends.
void check_conversation_recipe(PrepareRecipe& r, const Encoder& enc) {
  if (r.data_format != "chat" && r.data_format != "prompt_completion")
    throw ConfigError("data format \"" + r.data_format + "\": expected \"text\", \"chat\" or \"prompt_completion\"");
  if (!enc.tokenizer)
    throw ConfigError(str(r.data_format,
                          " data needs a Hugging Face tokenizer (its chat template and special tokens), "
                          "not \"",
                          enc.path, "\""),
                      "name a tokenizer.json or the model folder holding it");
  if (r.append_eos)
    throw ConfigError(str("--append-eos does not apply to ", r.data_format, " data: the template ends each turn"));
  if (r.on_bad_line != "error" && r.on_bad_line != "skip")
    throw ConfigError("on_bad_line \"" + r.on_bad_line + "\": expected \"error\" or \"skip\"");
  if (r.train_on != "assistant" && r.train_on != "all" && r.train_on != "last_assistant")
    throw ConfigError("train_on \"" + r.train_on + "\": expected \"assistant\", \"all\" or \"last_assistant\"");
  r.format = "jsonl";
  r.split_lines = false;
}

}  // namespace

bool eval_document(int64_t index, double fraction) {
  if (fraction <= 0) return false;
  return std::floor(static_cast<double>(index + 1) * fraction) > std::floor(static_cast<double>(index) * fraction);
}

std::vector<PreparedInput> hash_inputs(const std::vector<std::string>& paths, const std::string& format) {
  std::vector<PreparedInput> out;
  for (const auto& p : paths) {
    PreparedInput in;
    in.path = p;
    in.format = format.empty() ? name_of(format_of(p)) : format;
    in.crc = file_crc32c(p);  // names an unreadable file
    in.bytes = fs::file_size(p);
    out.push_back(in);
  }
  return out;
}

PrepareResult prepare(const PrepareOptions& o, const Encoder& enc) {
  const double t0 = now_s();
  if (o.inputs.empty()) throw ConfigError(o.what + ": no input file", "name the text or JSONL files to prepare");
  if (o.recipe.append_eos && !enc.eos)
    throw ConfigError(enc.path + ": the tokenizer names no EOS token, which --append-eos needs");
  PrepareResult r;
  PrepareManifest& m = r.manifest;
  m.recipe = o.recipe;
  std::unique_ptr<ConversationEncoder> conv;
  if (m.recipe.conversations()) {
    check_conversation_recipe(m.recipe, enc);
    resolve_chat_recipe(m.recipe, *enc.tokenizer, o.template_key);
    conv = std::make_unique<ConversationEncoder>(enc.tokenizer, m.recipe);
  }
  m.inputs = o.hashed.empty() ? hash_inputs(o.inputs, m.recipe.format) : o.hashed;
  m.recipe.shard_tokens = std::clamp<int64_t>(o.recipe.shard_tokens > 0 ? o.recipe.shard_tokens : kDefaultShardTokens,
                                              1, std::numeric_limits<int32_t>::max());
  m.key = prepare_key(enc.hash, m.recipe, m.inputs);
  const fs::path out(o.out);
  if (prepared_as(out, m.key, r)) return r;
  check_replaceable(out);
  PrepareOptions opts = o;
  opts.recipe = m.recipe;
  StagingDir staging(out);
  Pipeline p;
  const int jobs = o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  p.max_in_flight = 2 * static_cast<size_t>(jobs) + 2;
  uint64_t total = 0;
  for (const auto& in : m.inputs) total += in.bytes;
  Progress progress(o.progress, total, o.what);
  Writer w(staging.path().string(), opts, enc);
  std::vector<std::thread> threads;
  for (int i = 0; i < jobs; ++i)
    threads.emplace_back(worker, std::ref(p), std::cref(opts), std::cref(m.inputs), std::cref(enc), conv.get());
  std::thread writer([&] { w.run(p, progress); });
  read_all(p, opts, m.inputs);
  writer.join();
  {
    std::lock_guard<std::mutex> lock(p.m);
    p.stop = true;
    p.cv.notify_all();
  }
  for (auto& t : threads) t.join();
  if (w.error) std::rethrow_exception(w.error);
  progress.update(total, w.m.documents, w.m.tokens, true);
  m.documents = w.m.documents, m.tokens = w.m.tokens;
  m.eval_documents = w.m.eval_documents, m.eval_tokens = w.m.eval_tokens;
  for (const auto& s : w.train_.finish()) m.shards.push_back({s.file, "train", s.tokens, s.crc, s.mask_crc});
  for (const auto& s : w.eval_.finish()) m.shards.push_back({s.file, "eval", s.tokens, s.crc, s.mask_crc});
  if (conv) {
    for (auto* d : {w.train_docs_.get(), w.eval_docs_.get()}) {
      PreparedDocIndex x;
      x.split = d == w.train_docs_.get() ? "train" : "eval";
      d->finish(&x.file, &x.documents, &x.crc);
      m.doc_indexes.push_back(x);
    }
    m.eos_id = enc.eos ? static_cast<int64_t>(*enc.eos) : -1;
    m.trained_tokens = w.m.trained_tokens;
    m.bad_lines = w.m.bad_lines;
    m.tools_ignored = w.m.tools_ignored;
  }
  m.tokenizer = enc.path;
  m.tokenizer_hash = enc.hash;
  m.vocab_size = static_cast<int64_t>(enc.vocab_size);
  m.dtype = w.train_.width() == 2 ? "uint16" : "uint32";
  m.seconds = now_s() - t0;
  write_manifest(staging.path(), m);  // last: a folder without it is not a preparation
  // Another process (a rank started without a launching gtrain) may have finished the same
  // preparation meanwhile: its folder stays, as readers may have it open, and this one goes.
  if (prepared_as(out, m.key, r)) return r;
  staging.commit();
  r.seconds = m.seconds;
  r.text_bytes = w.text_bytes;
  r.peak_rss = peak_resident_bytes();
  return r;
}

}  // namespace gtrain::text
