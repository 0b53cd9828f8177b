// distill_command.cpp: `gtrain distill cache`: the teacher over the training split, its top-k
// written shard by shard (ranks take every ranks-th shard), the manifest by rank 0 once all are in.
#include "launcher/commands/distill_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "launcher/commands/run_command.h"
#include "launcher/launch/launch.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/common/cuda_device.h"
#include "runtime/common/torch_threads.h"
#include "runtime/core/distill_cache.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/startup.h"
#include "runtime/core/teacher_stats.h"
#include "runtime/data/dataset.h"
#include "runtime/models/kd_loss.h"
#include "runtime/models/token_layout.h"
#include "runtime/precision/precision.h"
#include "runtime/train/initial_weights.h"
#include "runtime/train/teacher.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

constexpr double kShardBytes = 64.0 * (1 << 20);  // a shard's size to aim at

// What every rank knows before the teacher runs.
struct CacheJob {
  JobConfig cfg;
  std::shared_ptr<Communicator> comm;
  torch::Device device = torch::kCPU;
  DataSplits data;
  std::shared_ptr<Model> teacher;
  DistillCacheManifest header;  // key, teacher, data identity, shard_tokens
  int64_t samples = 0;          // of the training split
  int64_t shard_samples = 0;    // samples a shard holds
  int64_t shards = 0;
  bool main = true;  // rank 0 and not --quiet: prints progress
};

std::shared_ptr<Communicator> open_world(const RankEnvironment& re) {
#ifdef GTRAIN_WITH_MPI
  if (re.launched) {
    MpiCommOptions mo;
    mo.timeout_s = 30 * 86400.0;  // ranks wait for the slowest one's shards at the end, however long
    mo.startup_timeout_s = mo.timeout_s;
    auto comm = MpiCommunicator::world(mo);
    start_rank_output_prefix(comm->rank());
    return comm;
  }
#else
  if (re.launched)
    throw ConfigError(str("this gtrain was built without MPI, so it cannot run as one of ", re.size, " ranks"),
                      "rebuild with libopenmpi-dev installed");
#endif
  return std::make_shared<LocalCommunicator>();
}

// The teacher, data and key on this rank; the cache folder emptied of an old manifest by rank 0.
CacheJob prepare(const DistillCacheOptions& o, JobConfig cfg, const RankEnvironment& re,
                 const std::map<std::string, std::string>& env) {
  CacheJob job;
  job.cfg = std::move(cfg);
  const JobConfig& c = job.cfg;
  job.comm = open_world(re);
  job.main = job.comm->rank() == 0 && !o.quiet;
  const DeviceChoice dev = rank_device(c, re, env);
  if (dev.cuda) {
    job.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dev.index));
    cuda::set_device(dev.index);
  }
  set_torch_threads(c.train.threads, re.local_size);
  job.data = open_datasets(c.data, c.model, c.train.seed);
  const Dataset& train = *job.data.train;
  const DataSpec spec = train.spec();
  if (!spec.tokens)
    throw ConfigError(std::string("distill.teacher: data.kind = \"") + name_of(c.data.kind) + "\" holds no tokens",
                      "distil a gpt or llama model on token data");
  const int64_t vocab = teacher_model_config(c).vocab;
  if (spec.vocab > vocab)
    throw ConfigError(str("distill.teacher: ", c.distill.teacher, " has a vocabulary of ", vocab,
                          " tokens, the data's ids reach ", spec.vocab - 1),
                      "distil from a teacher with the student's tokenizer");
  const std::string hash = base_model_hash(*job.comm, c.distill.teacher, "distill.teacher");
  job.teacher = build_teacher(c, spec, vocab, job.device);
  job.header.key = distill_cache_key(c, train, vocab, hash);
  job.header.teacher = c.distill.teacher;
  job.header.data_identity = train.identity();
  const int64_t T = spec.tokens_per_sample(), k = job.header.key.k;
  if (k > vocab)
    throw ConfigError(str("distill.top_k = ", k, " exceeds the teacher's vocabulary of ", vocab),
                      str("set distill.top_k to at most ", vocab));
  job.samples = train.size();
  job.shard_samples = std::max<int64_t>(1, static_cast<int64_t>(kShardBytes / static_cast<double>(T * (8 * k + 8))));
  // At most a rank's share, so every rank has shards to write.
  const int64_t share = (job.samples + job.comm->size() - 1) / job.comm->size();
  job.shard_samples = std::min(job.shard_samples, std::max<int64_t>(1, share));
  job.header.shard_tokens = job.shard_samples * T;
  job.shards = (job.samples + job.shard_samples - 1) / job.shard_samples;
  if (job.comm->rank() == 0) {
    // The old manifest first: a cache being remade is never read half-made.
    std::error_code ec;
    fs::create_directories(c.distill.cache, ec);
    if (ec) throw ConfigError("distill.cache: " + c.distill.cache + ": cannot create the folder: " + ec.message());
    fs::remove(fs::path(c.distill.cache) / kDistillCacheManifestFile, ec);
    if (ec) throw Error(c.distill.cache + ": cannot remove its old manifest: " + ec.message());
  }
  job.comm->barrier();
  return job;
}

// The teacher's top-k entries of samples [first, last), `batch` samples a forward.
DistillEntries teacher_entries(CacheJob& job, int64_t first, int64_t last, int64_t batch) {
  const Dataset& train = *job.data.train;
  const DistillCacheKey& key = job.header.key;
  Precision precision(job.cfg.precision, job.device);
  DistillEntries out;
  out.k = key.k;
  torch::NoGradGuard ng;
  for (int64_t from = first; from < last; from += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = from; i < std::min(last, from + batch); ++i) idx.push_back(i);
    const Batch b = collate_samples(train, idx);
    auto to = [&](const torch::Tensor& t) { return t.defined() ? t.to(job.device) : t; };
    // Every position (trained or not): the student's mask may differ from run to run.
    TokenLayoutScope layout(TokenLayout(to(b.positions), torch::Tensor(), b.sample_ids));
    torch::Tensor logits;
    {
      auto scope = precision.autocast();
      logits = job.teacher->forward(to(b.input));
    }
    const auto rows = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat);
    const TeacherTopK top = teacher_top_k(rows, key.k, key.temperature);
    const auto ids = top.ids.to(torch::kCPU, torch::kInt).contiguous();
    const auto values = top.logits.to(torch::kCPU, torch::kFloat).contiguous();
    const auto lse = top.lse.to(torch::kCPU, torch::kDouble).contiguous();
    out.ids.insert(out.ids.end(), ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
    out.logits.insert(out.logits.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
    out.lse.insert(out.lse.end(), lse.data_ptr<double>(), lse.data_ptr<double>() + lse.numel());
  }
  return out;
}

// This rank's shards (every size-th from its rank), then their sizes and checksums summed over the
// ranks ([shards, 2]: tokens, CRC-32C) so rank 0 can list them all.
torch::Tensor write_shards(CacheJob& job, int64_t batch) {
  const auto t0 = std::chrono::steady_clock::now();
  auto info = torch::zeros({std::max<int64_t>(job.shards, 1), 2}, torch::kLong);
  const int rank = job.comm->rank(), size = job.comm->size();
  int64_t done = 0, said = 0;
  for (int64_t i = rank; i < job.shards; i += size) {
    const int64_t first = i * job.shard_samples, last = std::min(job.samples, first + job.shard_samples);
    const DistillCacheShard s = write_distill_shard(job.cfg.distill.cache, i, teacher_entries(job, first, last, batch));
    info[i][0] = s.tokens;
    info[i][1] = static_cast<int64_t>(std::stoul(s.crc, nullptr, 16));
    done += last - first;
    const int64_t mine = (job.samples + size - 1) / size;  // about this rank's share
    if (job.main && (done * 10 / std::max<int64_t>(mine, 1) > said || last == job.samples)) {
      said = done * 10 / std::max<int64_t>(mine, 1);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cout << strf("distill cache: rank 0 has %lld of about %lld samples (%.1f s)", static_cast<long long>(done),
                        static_cast<long long>(mine), s)
                << std::endl;
    }
  }
  job.comm->allreduce(info);
  return info;
}

DistillCacheManifest write_manifest(const CacheJob& job, const torch::Tensor& info) {
  DistillCacheManifest m = job.header;
  for (int64_t i = 0; i < job.shards; ++i) {
    const int64_t tokens = info[i][0].item<int64_t>();
    m.shards.push_back(
        {distill_shard_file(i), tokens, strf("%08llx", static_cast<unsigned long long>(info[i][1].item<int64_t>()))});
    m.tokens += tokens;
  }
  write_distill_manifest(job.cfg.distill.cache, m);
  // Shards of an older, longer cache in the same folder: not listed, removed.
  std::error_code ec;
  for (int64_t i = job.shards;; ++i) {
    if (!fs::remove(fs::path(job.cfg.distill.cache) / distill_shard_file(i), ec)) break;
  }
  return m;
}

int make_cache(const DistillCacheOptions& o, JobConfig cfg, const RankEnvironment& re,
               const std::map<std::string, std::string>& env) {
  const auto t0 = std::chrono::steady_clock::now();
  CacheJob job = prepare(o, std::move(cfg), re, env);
  const DistillCacheKey& key = job.header.key;
  const double bytes = static_cast<double>(job.samples) * static_cast<double>(job.header.shard_tokens) /
                       static_cast<double>(job.shard_samples) * static_cast<double>(8 * key.k + 8);
  if (job.main)
    std::cout << "distill cache: teacher " << job.cfg.distill.teacher << " over " << job.samples
              << " samples of the training split (" << job.header.shard_tokens / job.shard_samples
              << " tokens each), top " << key.k << " at temperature " << key.temperature << ", on " << job.comm->size()
              << (job.comm->size() == 1 ? " rank" : " ranks") << " (" << job.device.str() << ") -> "
              << job.cfg.distill.cache << " (" << format_bytes(bytes) << " in " << plural(job.shards, "shard") << ")"
              << std::endl;
  const torch::Tensor info = write_shards(job, std::max<int64_t>(1, o.batch));
  if (job.comm->rank() == 0) {
    const DistillCacheManifest m = write_manifest(job, info);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!o.quiet)
      std::cout << "distill cache: wrote " << m.tokens << " tokens in "
                << plural(static_cast<int64_t>(m.shards.size()), "shard") << " to " << job.cfg.distill.cache << " in "
                << strf("%.1f", s) << " s; train the student with distill.cache = \"" << job.cfg.distill.cache << "\""
                << std::endl;
  }
  job.comm->barrier();
  return kExitOk;
}

}  // namespace

int distill_cache_command(const DistillCacheOptions& o) {
  const auto env = process_environment();
  JobConfig cfg = load_job_config(o.config_path, o.sets, env);
  if (!o.out.empty()) cfg.distill.cache = o.out;
  if (cfg.distill.teacher.empty())
    throw ConfigError("distill.teacher: not set in " + o.config_path + "; gtrain distill cache runs that teacher",
                      "set distill.teacher to a Hugging Face directory or a gtrain run");
  if (cfg.distill.cache.empty())
    throw ConfigError("distill.cache: not set in " + o.config_path + ": the cache needs a folder",
                      "set distill.cache = \"DIR\", or pass --out DIR");
  const RankEnvironment re = detect_rank_environment(env);
  require_mpi_wireup(re);
  // Text data: prepared once, here, where the student's run would prepare it; ranks take the folder.
  resolve_text_data(cfg, resolve_run_dir(cfg, o.config_path, ""), env, /*launcher=*/!re.launched, o.quiet);
  if (!re.launched && o.ranks > 1) {
    LaunchSpec spec;
    spec.ranks = o.ranks;
    spec.executable = self_executable();
    spec.args = o.argv;
    const MpirunResult r = run_mpirun(spec);
    return r.exit_code == 0 ? kExitOk : r.exit_code;
  }
  const int code = make_cache(o, std::move(cfg), re, env);
#ifdef GTRAIN_WITH_MPI
  MpiCommunicator::finalize();
#endif
  stop_rank_output_prefix();
  return code;
}

}  // namespace gtrain
