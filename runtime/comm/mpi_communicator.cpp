// mpi_communicator.cpp: MPI collectives over contiguous CPU tensors, and the collective watchdog.
#include "runtime/comm/mpi_communicator.h"

#ifdef GTRAIN_WITH_MPI

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>

#include "runtime/comm/comm_errors.h"
#include "runtime/core/heartbeat.h"

namespace gtrain {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Reductions need an MPI type. bf16/fp16 have none: they travel as 16-bit words and reduce with
// user-defined operations that compute each element in fp32 and round once (as NCCL does).
MPI_Datatype reduce_type(const torch::Tensor& t, const char* op, const std::string& backend) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return MPI_FLOAT;
    case torch::kDouble:
      return MPI_DOUBLE;
    case torch::kLong:
      return MPI_INT64_T;
    case torch::kInt:
      return MPI_INT32_T;
    case torch::kByte:
      return MPI_UINT8_T;
    case torch::kChar:
      return MPI_INT8_T;
    case torch::kBFloat16:
    case torch::kHalf:
      return MPI_UINT16_T;
    default:
      throw CommError("backend " + backend + " does not support dtype " + std::string(c10::toString(t.scalar_type())) +
                      " for " + op + " (use float32/float64/bfloat16/float16/int32/int64, or NCCL on GPUs)");
  }
}

template <typename T, int kKind>  // kKind: 0 sum, 1 max, 2 min
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = static_cast<T>(kKind == 0 ? x + y : kKind == 1 ? (x > y || x != x ? x : y) : (x < y || x != x ? x : y));
  }
}

struct SixteenBitOps {
  MPI_Op op[2][3];  // [bf16, fp16][sum, max, min]
  SixteenBitOps() {
    GT_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::BFloat16, 0>, 1, &op[0][0]));
    GT_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::BFloat16, 1>, 1, &op[0][1]));
    GT_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::BFloat16, 2>, 1, &op[0][2]));
    GT_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::Half, 0>, 1, &op[1][0]));
    GT_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::Half, 1>, 1, &op[1][1]));
    GT_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::Half, 2>, 1, &op[1][2]));
  }
};

MPI_Op mpi_op(ReduceOp op, c10::ScalarType dtype) {
  const int kind = op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0;
  if (dtype == torch::kBFloat16 || dtype == torch::kHalf) {
    static const SixteenBitOps ops;  // created on first use, after MPI_Init; freed by MPI_Finalize
    return ops.op[dtype == torch::kHalf ? 1 : 0][kind];
  }
  return kind == 1 ? MPI_MAX : kind == 2 ? MPI_MIN : MPI_SUM;
}

int count_of(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw CommError(std::string(what) + ": tensor of " + std::to_string(n) + " elements exceeds MPI's int count");
  return static_cast<int>(n);
}

void check_cpu(const torch::Tensor& t, const char* op) {
  if (!t.defined()) throw CommError(std::string("backend mpi: ") + op + " got an undefined tensor");
  if (!t.device().is_cpu()) {
    throw CommError(std::string("backend mpi does not support ") + t.device().str() + " tensors for " + op +
                    " (use the NCCL communicator for GPU tensors)");
  }
  if (!t.is_contiguous()) throw CommError(std::string("backend mpi: ") + op + " needs a contiguous tensor");
}

}  // namespace

// Watchdog: one thread per process watching the collective in flight (if any).
struct MpiCommunicator::Shared {
  double timeout_s = 0;  // 0 = auto (limit())
  double startup_timeout_s = 600;
  std::atomic<int64_t> since_ns{0};
  std::atomic<const char*> op{nullptr};
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;

  // The seconds a collective may take now: parallel.collective_timeout_s, or the hang rule over this
  // rank's own progress (heartbeat.h); the launching gtrain, when it watches, acts well before.
  double limit() const {
    const Heartbeat& hb = Heartbeat::get();
    HangRule rule;
    rule.fixed_s = timeout_s;
    rule.startup_timeout_s = startup_timeout_s;
    const double own = stuck_after_s(rule, phase_name(hb.current_phase()), hb.step(), hb.slowest_recent_step_s(),
                                     hb.expected_s(RankPhase::save), hb.expected_s(RankPhase::eval));
    return hb.started() ? 2.0 * own + 30.0 : own;
  }

  void run(int world_rank) {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, std::chrono::milliseconds(200));
      const int64_t since = since_ns.load();
      if (since == 0) continue;
      const double waited = static_cast<double>(now_ns() - since) * 1e-9;
      const double limit = this->limit();
      if (waited > limit) {
        const auto& ctx = ProcessContext::get();
        std::fprintf(stderr,
                     "gtrain: communication error: %s on rank %d (%s) did not finish within %.0f s; a peer rank "
                     "probably died or is stuck. Aborting all ranks; hint: raise parallel.collective_timeout_s "
                     "if steps are legitimately slower\n",
                     op.load() ? op.load() : "collective", world_rank, ctx.host.c_str(), limit);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, kExitFailure);
      }
    }
  }
};

class MpiCommunicator::Guard {
 public:
  Guard(Shared& s, const char* op) : s_(s) {
    s_.op.store(op);
    s_.since_ns.store(now_ns());
  }
  ~Guard() { s_.since_ns.store(0); }

 private:
  Shared& s_;
};

namespace {
std::shared_ptr<MpiCommunicator>& world_slot() {
  static auto* slot = new std::shared_ptr<MpiCommunicator>();  // never destroyed implicitly
  return *slot;
}
}  // namespace

std::shared_ptr<MpiCommunicator> MpiCommunicator::world(const MpiCommOptions& options) {
  if (world_slot()) return world_slot();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // Serialized: the data-parallel comm thread and the main thread never call MPI at once.
    GT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  auto shared = std::make_shared<Shared>();
  shared->timeout_s = options.timeout_s;
  shared->startup_timeout_s = options.startup_timeout_s;
  auto comm = std::shared_ptr<MpiCommunicator>(new MpiCommunicator(MPI_COMM_WORLD, false, shared));
  auto& ctx = ProcessContext::get();
  ctx.rank = comm->rank();
  ctx.world_size = comm->size();
  ctx.abort_job = [](int code) { MPI_Abort(MPI_COMM_WORLD, code); };
  shared->thread = std::thread([s = shared.get(), r = comm->rank()] { s->run(r); });
  world_slot() = comm;
  return comm;
}

void MpiCommunicator::finalize() {
  auto& w = world_slot();
  if (!w) return;
  auto shared = w->shared_;
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->stop = true;
  }
  shared->cv.notify_all();
  if (shared->thread.joinable()) shared->thread.join();
  w.reset();
  ProcessContext::get().abort_job = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned, std::shared_ptr<Shared> shared)
    : comm_(comm), owned_(owned), shared_(std::move(shared)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // MPI_Comm_free is collective: skip it while an error unwinds the stack (the job is aborting).
  if (owned_ && !finalized && std::uncaught_exceptions() == 0) MPI_Comm_free(&comm_);
}

void MpiCommunicator::allreduce(torch::Tensor& t, ReduceOp op) {
  check_cpu(t, "allreduce");
  MPI_Datatype type = reduce_type(t, "allreduce", backend());
  if (op == ReduceOp::kAvg && !t.is_floating_point())
    throw CommError("backend mpi: allreduce(avg) needs a floating tensor");
  Guard g(*shared_, "allreduce");
  GT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t.numel(), "allreduce"), type,
                             mpi_op(op, t.scalar_type()), comm_));
  if (op == ReduceOp::kAvg) t.div_(size_);
}

class MpiCommunicator::Request : public Work {
 public:
  Request(std::shared_ptr<Shared> shared, const char* op, std::vector<torch::Tensor> keep, torch::Tensor avg_out,
          int avg_div)
      : shared_(std::move(shared)), op_(op), keep_(std::move(keep)), avg_out_(std::move(avg_out)), avg_div_(avg_div) {}
  ~Request() override {
    if (!done_ && std::uncaught_exceptions() == 0) wait();
  }
  MPI_Request* handle() { return &req_; }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    GT_MPI_CHECK(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
    if (flag) finish();
    return done_;
  }
  void wait() override {
    if (done_) return;
    Guard g(*shared_, op_);
    GT_MPI_CHECK(MPI_Wait(&req_, MPI_STATUS_IGNORE));
    finish();
  }

 private:
  void finish() {
    done_ = true;
    if (avg_out_.defined()) avg_out_.div_(avg_div_);
    keep_.clear();
  }
  std::shared_ptr<Shared> shared_;
  const char* op_;
  std::vector<torch::Tensor> keep_;  // buffers MPI reads or writes until completion
  torch::Tensor avg_out_;
  int avg_div_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

std::shared_ptr<Work> MpiCommunicator::allreduce_async(torch::Tensor& t, ReduceOp op) {
  check_cpu(t, "allreduce");
  MPI_Datatype type = reduce_type(t, "allreduce", backend());
  if (op == ReduceOp::kAvg && !t.is_floating_point())
    throw CommError("backend mpi: allreduce(avg) needs a floating tensor");
  auto req = std::make_shared<Request>(shared_, "allreduce", std::vector<torch::Tensor>{t},
                                       op == ReduceOp::kAvg ? t : torch::Tensor(), size_);
  GT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t.numel(), "allreduce"), type,
                              mpi_op(op, t.scalar_type()), comm_, req->handle()));
  return req;
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter_async(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) {
  check_cpu(in, "reduce_scatter");
  check_cpu(out, "reduce_scatter");
  if (in.numel() != out.numel() * size_ || out.scalar_type() != in.scalar_type()) {
    throw CommError("backend mpi: reduce_scatter input must hold world_size x output elements of the same dtype");
  }
  MPI_Datatype type = reduce_type(in, "reduce_scatter", backend());
  auto req = std::make_shared<Request>(shared_, "reduce_scatter", std::vector<torch::Tensor>{in, out},
                                       op == ReduceOp::kAvg ? out : torch::Tensor(), size_);
  GT_MPI_CHECK(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out.numel(), "reduce_scatter"), type,
                                         mpi_op(op, in.scalar_type()), comm_, req->handle()));
  return req;
}

std::shared_ptr<Work> MpiCommunicator::allgather_async(const torch::Tensor& in, torch::Tensor& out) {
  check_cpu(in, "allgather");
  check_cpu(out, "allgather");
  if (out.numel() != in.numel() * size_ || out.scalar_type() != in.scalar_type()) {
    throw CommError("backend mpi: allgather output must hold world_size x input elements of the same dtype");
  }
  auto req =
      std::make_shared<Request>(shared_, "allgather", std::vector<torch::Tensor>{in, out}, torch::Tensor(), size_);
  const int bytes = count_of(in.nbytes(), "allgather");
  GT_MPI_CHECK(MPI_Iallgather(in.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, comm_, req->handle()));
  return req;
}

std::shared_ptr<Work> MpiCommunicator::alltoall_async(const torch::Tensor& in, torch::Tensor& out) {
  check_cpu(in, "alltoall");
  check_cpu(out, "alltoall");
  if (in.nbytes() != out.nbytes() || in.numel() % size_ != 0 || !in.is_contiguous() || !out.is_contiguous()) {
    throw CommError("backend mpi: alltoall input and output must be contiguous, of one size divisible by world_size");
  }
  auto req =
      std::make_shared<Request>(shared_, "alltoall", std::vector<torch::Tensor>{in, out}, torch::Tensor(), size_);
  const int bytes = count_of(in.nbytes() / static_cast<size_t>(size_), "alltoall");
  GT_MPI_CHECK(MPI_Ialltoall(in.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, comm_, req->handle()));
  return req;
}

void MpiCommunicator::alltoall(const torch::Tensor& in, torch::Tensor& out) {
  alltoall_async(in, out)->wait();
}

std::shared_ptr<Work> MpiCommunicator::send_async(const torch::Tensor& t, int dst, int tag) {
  check_cpu(t, "send");
  auto req = std::make_shared<Request>(shared_, "send", std::vector<torch::Tensor>{t}, torch::Tensor(), size_);
  GT_MPI_CHECK(MPI_Isend(t.data_ptr(), count_of(t.nbytes(), "send"), MPI_BYTE, dst, tag, comm_, req->handle()));
  return req;
}

void MpiCommunicator::broadcast(torch::Tensor& t, int root) {
  check_cpu(t, "broadcast");
  Guard g(*shared_, "broadcast");
  GT_MPI_CHECK(MPI_Bcast(t.data_ptr(), count_of(t.nbytes(), "broadcast"), MPI_BYTE, root, comm_));
}

void MpiCommunicator::allgather(const torch::Tensor& in, torch::Tensor& out) {
  check_cpu(in, "allgather");
  check_cpu(out, "allgather");
  if (out.numel() != in.numel() * size_ || out.scalar_type() != in.scalar_type()) {
    throw CommError("backend mpi: allgather output must hold world_size x input elements of the same dtype");
  }
  Guard g(*shared_, "allgather");
  const int bytes = count_of(in.nbytes(), "allgather");
  GT_MPI_CHECK(MPI_Allgather(in.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, comm_));
}

void MpiCommunicator::reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) {
  check_cpu(in, "reduce_scatter");
  check_cpu(out, "reduce_scatter");
  if (in.numel() != out.numel() * size_ || out.scalar_type() != in.scalar_type()) {
    throw CommError("backend mpi: reduce_scatter input must hold world_size x output elements of the same dtype");
  }
  MPI_Datatype type = reduce_type(in, "reduce_scatter", backend());
  Guard g(*shared_, "reduce_scatter");
  GT_MPI_CHECK(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out.numel(), "reduce_scatter"), type,
                                        mpi_op(op, in.scalar_type()), comm_));
  if (op == ReduceOp::kAvg) out.div_(size_);
}

void MpiCommunicator::send(const torch::Tensor& t, int dst, int tag) {
  check_cpu(t, "send");
  Guard g(*shared_, "send");
  GT_MPI_CHECK(MPI_Send(t.data_ptr(), count_of(t.nbytes(), "send"), MPI_BYTE, dst, tag, comm_));
}

void MpiCommunicator::recv(torch::Tensor& t, int src, int tag) {
  check_cpu(t, "recv");
  Guard g(*shared_, "recv");
  MPI_Status status;
  GT_MPI_CHECK(MPI_Recv(t.data_ptr(), count_of(t.nbytes(), "recv"), MPI_BYTE, src, tag, comm_, &status));
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (got != static_cast<int64_t>(t.nbytes())) {
    throw CommError("backend mpi: recv from rank " + std::to_string(src) + " expected " + std::to_string(t.nbytes()) +
                    " bytes, got " + std::to_string(got));
  }
}

void MpiCommunicator::send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int tag) {
  check_cpu(out, "send_recv");
  check_cpu(in, "send_recv");
  Guard g(*shared_, "send_recv");
  MPI_Status status;
  GT_MPI_CHECK(MPI_Sendrecv(out.data_ptr(), count_of(out.nbytes(), "send_recv"), MPI_BYTE, peer, tag, in.data_ptr(),
                            count_of(in.nbytes(), "send_recv"), MPI_BYTE, peer, tag, comm_, &status));
}

void MpiCommunicator::barrier() {
  Guard g(*shared_, "barrier");
  GT_MPI_CHECK(MPI_Barrier(comm_));
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm sub;
  GT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(sub, true, shared_));
}

void MpiCommunicator::abort(const std::string& reason) {
  std::fprintf(stderr, "%s\n", reason.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kExitFailure);
}

}  // namespace gtrain

#endif  // GTRAIN_WITH_MPI
