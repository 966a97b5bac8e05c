#include "executor/comm/mpi_communicator.h"

#ifdef LLMPLAN_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "executor/cpu/elementwise.h"
#endif

namespace llmplan::exec {

#ifndef LLMPLAN_HAVE_MPI
bool mpi_built() { return false; }
Result<std::unique_ptr<Communicator>> create_mpi_communicator(const ParallelPlan&, double) {
  return Status::bad_input("this llmplan was built without MPI (install libopenmpi-dev and reconfigure)");
}
int mpi_node_local_rank() { return -1; }
#else
bool mpi_built() { return true; }

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // moved as bits; MPI has no 16-bit float to sum (see widen)
  }
  return MPI_BYTE;
}

// 16-bit sums: MPI knows no bf16/fp16 type (MPI_UINT16_T would add the bit patterns), so
// the values are widened to fp32, summed there and rounded once on the way back -- which is
// also NCCL's accuracy class (it accumulates 16-bit reductions in fp32 within a kernel).
// The fp32 copies are host temporaries outside the TrackingAllocator (n x 4 bytes, the
// group size times that for a reduce-scatter): --memory-limit and the measured peaks do
// not see them, as they do not see MPI's own buffers.
bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }
void widen(const void* in, float* out, int64_t n, DType t) {
  if (t == DType::bf16) cpu::cast<bf16_t, float>(static_cast<const bf16_t*>(in), out, n);
  else cpu::cast<f16_t, float>(static_cast<const f16_t*>(in), out, n);
}
void narrow(const float* in, void* out, int64_t n, DType t) {
  if (t == DType::bf16) cpu::cast<float, bf16_t>(in, static_cast<bf16_t*>(out), n);
  else cpu::cast<float, f16_t>(in, static_cast<f16_t*>(out), n);
}

Status check(int rc, const char* what, Group g) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return Status::runtime("rank " + std::to_string(r) + ": MPI " + what + " on the " + to_string(g) +
                         " group failed (a peer rank may have died): " + std::string(msg, static_cast<size_t>(len)));
}

class MpiCommunicator final : public Communicator {
 public:
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    for (MPI_Comm& c : comms_)
      if (c != MPI_COMM_WORLD && c != MPI_COMM_NULL) MPI_Comm_free(&c);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }

  static Result<std::unique_ptr<Communicator>> create(const ParallelPlan& plan, double watchdog_s) {
    int inited = 0;
    MPI_Initialized(&inited);
    int level = MPI_THREAD_SINGLE;
    if (!inited) MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level);
    else MPI_Query_thread(&level);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    auto c = std::unique_ptr<MpiCommunicator>(new MpiCommunicator());
    c->plan_ = plan;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world_size_);
    c->thread_multiple_ = level >= MPI_THREAD_MULTIPLE;
    if (c->world_size_ != plan.world_size())
      return Status::bad_input("started with " + std::to_string(c->world_size_) + " MPI processes but the plan needs " +
                               std::to_string(plan.world_size()) + " (dp" + std::to_string(plan.dp) + " tp" + std::to_string(plan.tp) +
                               " pp" + std::to_string(plan.pp) + " cp" + std::to_string(plan.cp) + "): " +
                               launch_command(plan.world_size(), "<plan>"));
    c->c_ = coords_of(plan, c->world_rank_);
    c->comms_[0] = MPI_COMM_WORLD;
    if ((plan.dp * plan.cp) % std::max(1, plan.ep) != 0)
      return Status::bad_input("ep " + std::to_string(plan.ep) + " must divide dp*cp " + std::to_string(plan.dp * plan.cp));
    for (Group g : kSubgroups) {  // colour: the coordinates other than g's; key: g's coordinate
      const GroupSplit s = group_split(plan, c->c_, g);
      MPI_Comm& out = c->comms_[static_cast<int>(g)];
      if (Status st = check(MPI_Comm_split(MPI_COMM_WORLD, s.colour, s.key, &out), "Comm_split", g); !st) return st;
      MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
    }
    if (watchdog_s > 0) c->start_watchdog(watchdog_s);
    return std::unique_ptr<Communicator>(std::move(c));
  }

  int rank(Group g) const override {
    int r = 0;
    MPI_Comm_rank(comms_[static_cast<int>(g)], &r);
    return r;
  }
  int size(Group g) const override {
    int n = 1;
    MPI_Comm_size(comms_[static_cast<int>(g)], &n);
    return n;
  }
  bool modelled() const override { return false; }
  std::string name() const override { return "mpi"; }

  Status all_reduce_sum(void* buf, int64_t n, DType t, Group g) override {
    if (is_16bit(t)) {
      std::vector<float> w(static_cast<size_t>(n));
      widen(buf, w.data(), n, t);
      if (Status s = all_reduce_sum(w.data(), n, DType::f32, g); !s) return s;
      narrow(w.data(), buf, n, t);
      return Status::ok();
    }
    return check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(n), mpi_type(t), MPI_SUM, comm(g)), "Allreduce", g);
  }
  Status reduce_scatter_sum(const void* in, void* out, int64_t n, DType t, Group g) override {
    if (is_16bit(t)) {  // in: n x group size elements
      const int64_t total = n * size(g);
      std::vector<float> wi(static_cast<size_t>(total)), wo(static_cast<size_t>(n));
      widen(in, wi.data(), total, t);
      if (Status s = reduce_scatter_sum(wi.data(), wo.data(), n, DType::f32, g); !s) return s;
      narrow(wo.data(), out, n, t);
      return Status::ok();
    }
    return check(MPI_Reduce_scatter_block(in, out, static_cast<int>(n), mpi_type(t), MPI_SUM, comm(g)), "Reduce_scatter", g);
  }
  Status all_gather(const void* in, void* out, int64_t n, DType t, Group g) override {
    return check(MPI_Allgather(in, static_cast<int>(n), mpi_type(t), out, static_cast<int>(n), mpi_type(t), comm(g)), "Allgather", g);
  }
  Status broadcast(void* buf, int64_t n, DType t, int root, Group g) override {
    return check(MPI_Bcast(buf, static_cast<int>(n), mpi_type(t), root, comm(g)), "Bcast", g);
  }
  Status all_to_all(const void* in, void* out, int64_t n, DType t, Group g) override {
    return check(MPI_Alltoall(in, static_cast<int>(n), mpi_type(t), out, static_cast<int>(n), mpi_type(t), comm(g)), "Alltoall", g);
  }
  Status send(const void* buf, int64_t n, DType t, int peer, Group g, int tag) override {
    return check(MPI_Send(buf, static_cast<int>(n), mpi_type(t), peer, tag, comm(g)), "Send", g);
  }
  Status recv(void* buf, int64_t n, DType t, int peer, Group g, int tag) override {
    return check(MPI_Recv(buf, static_cast<int>(n), mpi_type(t), peer, tag, comm(g), MPI_STATUS_IGNORE), "Recv", g);
  }
  Status sendrecv(const void* sbuf, void* rbuf, int64_t n, DType t, int peer, Group g, int stag, int rtag) override {
    return check(MPI_Sendrecv(sbuf, static_cast<int>(n), mpi_type(t), peer, stag, rbuf, static_cast<int>(n), mpi_type(t), peer, rtag,
                              comm(g), MPI_STATUS_IGNORE),
                 "Sendrecv", g);
  }
  Status ring_shift(const void* sbuf, void* rbuf, int64_t n, DType t, Group g, int tag) override {
    int size = 1, me = 0;
    MPI_Comm_size(comm(g), &size);
    MPI_Comm_rank(comm(g), &me);
    return check(MPI_Sendrecv(sbuf, static_cast<int>(n), mpi_type(t), (me + 1) % size, tag, rbuf, static_cast<int>(n), mpi_type(t),
                              (me - 1 + size) % size, tag, comm(g), MPI_STATUS_IGNORE),
                 "Sendrecv (ring shift)", g);
  }
  Result<int> isend(const void* buf, int64_t n, DType t, int peer, Group g, int tag) override {
    MPI_Request rq = MPI_REQUEST_NULL;
    if (Status s = check(MPI_Isend(buf, static_cast<int>(n), mpi_type(t), peer, tag, comm(g), &rq), "Isend", g); !s) return s;
    for (size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i] == MPI_REQUEST_NULL) {
        requests_[i] = rq;
        return static_cast<int>(i);
      }
    requests_.push_back(rq);
    return static_cast<int>(requests_.size()) - 1;
  }
  Result<bool> test_send(int h) override {
    if (h < 0) return true;
    int done = 0;
    if (Status s = check(MPI_Test(&requests_[static_cast<size_t>(h)], &done, MPI_STATUS_IGNORE), "Test", Group::pp); !s) return s;
    return done != 0;  // a completed request is MPI_REQUEST_NULL again: its handle is free
  }
  Status wait_send(int h) override {
    if (h < 0) return Status::ok();
    return check(MPI_Wait(&requests_[static_cast<size_t>(h)], MPI_STATUS_IGNORE), "Wait", Group::pp);
  }
  Status barrier(Group g) override { return check(MPI_Barrier(comm(g)), "Barrier", g); }
  void progress() override { last_ = clock_now(); }

 private:
  MpiCommunicator() = default;
  MPI_Comm comm(Group g) const { return comms_[static_cast<int>(g)]; }
  static double clock_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void start_watchdog(double seconds) {
    last_ = clock_now();
    watchdog_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> l(mu_);
      while (!stop_) {
        cv_.wait_for(l, std::chrono::milliseconds(200));
        if (stop_) break;
        const double idle = clock_now() - last_.load();
        if (idle > seconds) {
          std::fprintf(stderr,
                       "llmplan: rank %d: no progress for %.0f s (a peer rank probably died or hangs); aborting the job\n",
                       world_rank_, idle);
          std::fflush(stderr);
          if (thread_multiple_) MPI_Abort(MPI_COMM_WORLD, 3);
          std::_Exit(3);  // the launcher then terminates the other ranks
        }
      }
    });
  }

  std::vector<MPI_Request> requests_;  // isend handles; MPI_REQUEST_NULL: free
  ParallelPlan plan_;
  RankCoords c_;
  int world_rank_ = 0, world_size_ = 1;
  bool thread_multiple_ = false;
  MPI_Comm comms_[kGroups] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL,
                              MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  std::atomic<double> last_{0};
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace

Result<std::unique_ptr<Communicator>> create_mpi_communicator(const ParallelPlan& plan, double watchdog_seconds) {
  return MpiCommunicator::create(plan, watchdog_seconds);
}

int mpi_node_local_rank() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (!inited || fin) return -1;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return -1;
  int r = -1;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}
#endif

}  // namespace llmplan::exec
