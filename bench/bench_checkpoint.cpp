// bench_checkpoint.cpp: checkpoint save throughput against dd writing the same bytes to the same
// disk, the training stall of an async save against a synchronous one, and load time.
// Run: build/bench_checkpoint [MB] [dir]
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/core/errors.h"
#include "runtime/core/startup.h"

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

static double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

static int run(int64_t mb, const std::string& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A model-like state: 64 tensors of mb/64 MB each.
  std::vector<gtrain::TensorShard> shards;
  const int64_t per = mb * (1 << 20) / 4 / 64;
  for (int i = 0; i < 64; ++i) {
    auto t = torch::randn({per});
    shards.push_back({"t" + std::to_string(i), {per}, {0}, {per}, 0, t, true});
  }
  auto request = [&](int64_t step) {
    gtrain::SaveRequest r;
    r.dir = dir + "/ckpt";
    r.step = step;
    r.shards = shards;
    r.keep = 1;
    r.token = "bench";
    r.meta = gtrain::CheckpointMeta{};  // the model key alone
    return r;
  };
  // dd: the same random bytes (from a page-cached file, so only the write is timed), same disk,
  // flushed like our fsync. Zeros would flatter dd on thin-provisioned virtual disks.
  {
    std::FILE* f = std::fopen((dir + "/src.bin").c_str(), "wb");
    for (const auto& s : shards) std::fwrite(s.data.data_ptr(), 1, s.data.nbytes(), f);
    std::fclose(f);
  }
  const std::string dd =
      "dd if=" + dir + "/src.bin of=" + dir + "/dd.bin bs=1M count=" + std::to_string(mb) + " conv=fsync status=none";
  double dd_s = 1e9, sync_s = 1e9, stall_s = 1e9, live_s = 1e9, load_s = 1e9;
  // One writer of each kind for the whole bench, as a training run keeps one: its staging memory
  // is mapped once (the async one ahead of its first save, as the trainer does after step 1).
  gtrain::CheckpointWriter sync(false), async(true);
  async.prepare(static_cast<size_t>(mb) << 20);
  async.wait();
  sync.save(request(1000));  // the synchronous writer maps its staging memory in its first save
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    if (std::system(dd.c_str()) != 0) throw std::runtime_error("dd failed: " + dd);
    dd_s = std::min(dd_s, secs_since(t0));
    fs::remove(dir + "/dd.bin");

    t0 = Clock::now();
    sync.save(request(1001 + 3 * rep));
    sync_s = std::min(sync_s, secs_since(t0));

    // Async, tensors copied in save() (the final save: nothing runs while it writes).
    t0 = Clock::now();
    async.save(request(1002 + 3 * rep));
    stall_s = std::min(stall_s, secs_since(t0));
    async.wait();

    // Async, live tensors (an interval save): the writer thread copies them while the next step's
    // forward and backward run; training waits only if that copy is not done by its optimizer step.
    auto live = request(1003 + 3 * rep);
    live.live_sources = true;
    t0 = Clock::now();
    async.save(std::move(live));
    live_s = std::min(live_s, secs_since(t0));
    async.wait();

    t0 = Clock::now();
    // The newest committed checkpoint (this one has no training facts, so the training run's
    // find_latest_valid_checkpoint would pass it over).
    const std::string latest = gtrain::find_latest_complete_checkpoint(dir + "/ckpt");
    if (latest.empty()) throw gtrain::CheckpointError(dir + "/ckpt: no committed checkpoint after the saves");
    gtrain::CheckpointReader ck(latest);
    for (const auto& n : ck.tensor_names()) ck.read(n);
    load_s = std::min(load_s, secs_since(t0));
  }
  const double gb = static_cast<double>(mb) / 1024.0;
  std::printf("state %lld MB in 64 tensors, best of 3\n", (long long)mb);
  std::printf("save (sync, fsync, CRC-32C) %5.3f s  %6.2f GB/s\n", sync_s, gb / sync_s);
  std::printf("dd conv=fsync              %6.3f s  %6.2f GB/s\n", dd_s, gb / dd_s);
  std::printf("save / dd throughput        %.2fx   (target >= 0.7x)\n", dd_s / sync_s);
  std::printf("async save stall, copy     %6.3f s  = %.3fx of the synchronous save (a final save)\n", stall_s,
              stall_s / sync_s);
  std::printf(
      "async save stall, live     %6.3f s  = %.3fx of the synchronous save (an interval save; the\n"
      "                                      copy runs beside the next step: bench_save_stall.sh)\n",
      live_s, live_s / sync_s);
  std::printf("load + verify (read all)   %6.3f s  %6.2f GB/s\n", load_s, gb / load_s);
  fs::remove_all(dir);
  return 0;
}

int main(int argc, char** argv) {
  gtrain::tune_malloc();
  const int64_t mb = argc > 1 ? std::atoll(argv[1]) : 256;
  if (mb < 1) {
    std::fprintf(stderr, "bench_checkpoint: MB must be a whole number of megabytes >= 1, got '%s'\n", argv[1]);
    return 2;
  }
  const std::string dir = argc > 2 ? argv[2] : (fs::temp_directory_path() / "gtrain-bench-ckpt").string();
  try {
    return run(mb, dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
}
