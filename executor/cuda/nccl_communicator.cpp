#include "executor/cuda/nccl_communicator.h"

#include <nccl.h>

#include <array>
#include <string>
#include <vector>

#include "executor/cuda/check.h"
#include "executor/cuda/nccl_comm.h"

namespace llmplan::exec::cuda {
namespace {

bool on_device(const void* p) { return is_device_memory(p); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(CudaContext& ctx, Communicator& host) : ctx_(ctx), host_(host) {}
  ~NcclCommunicator() override {
    (void)ctx_.synchronize();  // no NCCL work may be in flight when its communicator goes
    for (std::unique_ptr<NcclComm>& c : owned_) c.reset();  // subgroups first, the world last
    world_.reset();
  }

  Status init() {
    const int world = host_.size(Group::world), me = host_.rank(Group::world);
    // The world communicator: rank 0's unique id, broadcast as bytes over the host (MPI).
    ncclUniqueId id{};
    if (me == 0) {
      Result<ncclUniqueId> u = NcclComm::unique_id();
      if (!u) return tag(u.status(), Group::world);
      id = *u;
    }
    if (Status s = host_.broadcast(&id, static_cast<int64_t>(sizeof id), DType::u8, 0, Group::world); !s) return s;
    Result<std::unique_ptr<NcclComm>> w = NcclComm::init(ctx_, id, world, me);
    if (!w) return tag(w.status(), Group::world);
    world_ = std::move(*w);
    comms_[static_cast<int>(Group::world)] = world_.get();
    const ParallelPlan plan = plan_of(host_);
    const RankCoords k = host_.coords();
    for (Group g : kSubgroups) {
      const int n = host_.size(g);
      if (n == 1) continue;  // local copies (see nccl_communicator.h)
      if (n == world) {
        comms_[static_cast<int>(g)] = world_.get();
        continue;
      }
      const GroupSplit sp = group_split(plan, k, g);
      Result<std::unique_ptr<NcclComm>> c = world_->split(sp.colour, sp.key);
      if (!c) return tag(c.status(), g);
      if ((*c)->size() != n || (*c)->rank() != host_.rank(g))
        return Status::runtime("ncclCommSplit of the " + std::string(to_string(g)) + " group: rank " +
                               std::to_string((*c)->rank()) + " of " + std::to_string((*c)->size()) + ", the layout says " +
                               std::to_string(host_.rank(g)) + " of " + std::to_string(n));
      comms_[static_cast<int>(g)] = c->get();
      owned_.push_back(std::move(*c));
    }
    return Status::ok();
  }

  int rank(Group g) const override { return host_.rank(g); }
  int size(Group g) const override { return host_.size(g); }
  bool modelled() const override { return false; }
  std::string name() const override { return "nccl"; }

  Status all_reduce_sum(void* buf, int64_t count, DType t, Group g) override {
    if (!on_device(buf)) return host_.all_reduce_sum(buf, count, t, g);
    return run(g, [&](NcclComm* c) -> Status {
      return c ? c->all_reduce(buf, buf, count, t, ReduceOp::sum) : Status::ok();
    });
  }
  Status reduce_scatter_sum(const void* in, void* out, int64_t count, DType t, Group g) override {
    Result<bool> dev = placement(in, out, "reduce_scatter_sum");
    if (!dev) return dev.status();
    if (!*dev) return host_.reduce_scatter_sum(in, out, count, t, g);
    return run(g, [&](NcclComm* c) -> Status {
      return c ? c->reduce_scatter(in, out, count, t, ReduceOp::sum) : local_copy(out, in, count, t);
    });
  }
  Status all_gather(const void* in, void* out, int64_t count, DType t, Group g) override {
    Result<bool> dev = placement(in, out, "all_gather");
    if (!dev) return dev.status();
    if (!*dev) return host_.all_gather(in, out, count, t, g);
    return run(g, [&](NcclComm* c) -> Status {
      return c ? c->all_gather(in, out, count, t) : local_copy(out, in, count, t);
    });
  }
  Status all_to_all(const void* in, void* out, int64_t count, DType t, Group g) override {
    Result<bool> dev = placement(in, out, "all_to_all");
    if (!dev) return dev.status();
    if (!*dev) return host_.all_to_all(in, out, count, t, g);
    return run(g, [&](NcclComm* c) -> Status {
      return c ? c->all_to_all(in, out, count, t) : local_copy(out, in, count, t);
    });
  }
  Status broadcast(void* buf, int64_t count, DType t, int root, Group g) override {
    if (!on_device(buf)) return host_.broadcast(buf, count, t, root, g);
    return run(g, [&](NcclComm* c) -> Status {
      return c ? c->broadcast(buf, buf, count, t, root) : Status::ok();
    });
  }
  Status send(const void* buf, int64_t count, DType t, int peer, Group g, int tag) override {
    if (!on_device(buf)) return host_.send(buf, count, t, peer, g, tag);
    return run(g, [&](NcclComm* c) { return c ? c->send(buf, count, t, peer) : to_self(g); });
  }
  Status recv(void* buf, int64_t count, DType t, int peer, Group g, int tag) override {
    if (!on_device(buf)) return host_.recv(buf, count, t, peer, g, tag);
    return run(g, [&](NcclComm* c) { return c ? c->recv(buf, count, t, peer) : to_self(g); });
  }
  Status sendrecv(const void* sbuf, void* rbuf, int64_t count, DType t, int peer, Group g, int send_tag,
                  int recv_tag) override {
    Result<bool> dev = placement(sbuf, rbuf, "sendrecv");
    if (!dev) return dev.status();
    if (!*dev) return host_.sendrecv(sbuf, rbuf, count, t, peer, g, send_tag, recv_tag);
    return run(g, [&](NcclComm* c) { return c ? c->sendrecv(sbuf, rbuf, count, t, peer) : to_self(g); });
  }
  // A group of one passes its buffer to itself: a copy.
  Status ring_shift(const void* sbuf, void* rbuf, int64_t count, DType t, Group g, int tag) override {
    Result<bool> dev = placement(sbuf, rbuf, "ring_shift");
    if (!dev) return dev.status();
    if (!*dev) return host_.ring_shift(sbuf, rbuf, count, t, g, tag);
    const int n = size(g), r = rank(g);
    return run(g, [&](NcclComm* c) {
      return c ? c->exchange(sbuf, (r + 1) % n, rbuf, (r - 1 + n) % n, count, t) : local_copy(rbuf, sbuf, count, t);
    });
  }
  Result<int> isend(const void* buf, int64_t count, DType t, int peer, Group g, int tag) override {
    if (!on_device(buf)) return host_.isend(buf, count, t, peer, g, tag);
    if (Status s = send(buf, count, t, peer, g, tag); !s) return s;
    return -1;
  }
  // Handles >= 0 are the host communicator's (device sends return -1).
  Result<bool> test_send(int handle) override { return handle < 0 ? Result<bool>(true) : host_.test_send(handle); }
  Status wait_send(int handle) override { return handle < 0 ? Status::ok() : host_.wait_send(handle); }
  Status barrier(Group g) override { return host_.barrier(g); }
  void progress() override { host_.progress(); }
  bool can_defer() const override { return true; }
  void set_deferred(bool on) override { deferred_ = on; }
  Status fence() override { return ctx_.order_after(ctx_.compute_stream(), ctx_.comm_stream()); }

 private:
  // The host communicator's plan, reconstructed from its group sizes (the layout needs
  // only tp, cp, dp, pp and ep).
  static ParallelPlan plan_of(const Communicator& h) {
    ParallelPlan p;
    p.tp = h.size(Group::tp);
    p.cp = h.size(Group::cp);
    p.dp = h.size(Group::dp);
    p.pp = h.size(Group::pp);
    p.ep = h.size(Group::ep);
    return p;
  }

  // "rank 1, dp group: ncclAllReduce: ..." (the call names itself in NcclComm's message).
  Status tag(const Status& s, Group g) const {
    return s.with_context("rank " + std::to_string(host_.rank(Group::world)) + ", " + to_string(g) + " group");
  }

  // Both buffers on the device (true) or both on the host (false).
  static Result<bool> placement(const void* a, void* b, const char* what) {
    const bool da = on_device(a), db = on_device(b);
    if (da != db)
      return Status::bad_input(std::string("nccl ") + what + ": one buffer in device and one in host memory (both must be "
                                                             "device memory for NCCL, or both host memory for MPI)");
    return da;
  }

  // The collective `f` on g's NCCL communicator (nullptr for a group of one), ordered
  // between the compute and communication streams (see the header).
  template <class F>
  Status run(Group g, F&& f) {
    if (Status s = ctx_.order_after(ctx_.comm_stream(), ctx_.compute_stream()); !s) return tag(s, g);
    if (Status s = f(comms_[static_cast<int>(g)]); !s) return tag(s, g);
    if (deferred_) return Status::ok();  // the caller fences before it touches the buffers
    return tag(ctx_.order_after(ctx_.compute_stream(), ctx_.comm_stream()), g);
  }

  Status local_copy(void* out, const void* in, int64_t count, DType t) {
    if (out == in || count == 0) return Status::ok();
    return cuda_status(cudaMemcpyAsync(out, in, static_cast<size_t>(count * dtype_size(t)), cudaMemcpyDeviceToDevice,
                                       ctx_.comm_stream()),
                       "cudaMemcpyAsync (a group of one)");
  }
  static Status to_self(Group g) {
    return Status::bad_input(std::string("nccl: point-to-point in the ") + to_string(g) + " group of one rank (to itself)");
  }

  CudaContext& ctx_;
  Communicator& host_;
  std::unique_ptr<NcclComm> world_;
  std::vector<std::unique_ptr<NcclComm>> owned_;  // the split subgroups
  std::array<NcclComm*, kGroups> comms_{};         // per Group (communicator.h); nullptr: a group of one
  bool deferred_ = false;                          // set_deferred: no compute wait after a call
};

}  // namespace

Result<std::unique_ptr<Communicator>> create_nccl_communicator(CudaContext& ctx, Communicator& host) {
  if (host.modelled())
    return Status::bad_input("nccl: the host communicator is a rank proxy's (modelled); NCCL needs real ranks (mpirun)");
  auto c = std::make_unique<NcclCommunicator>(ctx, host);
  if (Status s = c->init(); !s) return s;
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace llmplan::exec::cuda
