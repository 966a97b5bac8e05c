#include "executor/cuda/nccl_comm.h"

#include <string>

#include "executor/cuda/check.h"

namespace llmplan::exec::cuda {

namespace {
Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return nccl_error(r, what);
}
}  // namespace

Status nccl_error(ncclResult_t r, const std::string& what, const char* last_error) {
  std::string m = what + ": " + ncclGetErrorString(r);
  if (last_error != nullptr && *last_error) m += " (" + std::string(last_error) + ")";
  return Status::runtime(m);
}

Result<ncclDataType_t> nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::u8: return ncclUint8;
  }
  return Status::bad_input("nccl: unsupported dtype");
}

namespace {
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}
}  // namespace

Result<ncclUniqueId> NcclComm::unique_id() {
  ncclUniqueId id{};
  if (Status s = nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s) return s;
  return id;
}

Result<std::unique_ptr<NcclComm>> NcclComm::init(CudaContext& ctx, const ncclUniqueId& id, int nranks, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Status::bad_input("nccl init: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  }
  LLMPLAN_CUDA_TRY(cudaSetDevice(ctx.device()));
  ncclComm_t comm = nullptr;
  if (Status s = nccl_status(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank"); !s) return s;
  return std::unique_ptr<NcclComm>(new NcclComm(ctx, comm, nranks, rank));
}

Result<std::unique_ptr<NcclComm>> NcclComm::split(int colour, int key) {
  ncclComm_t out = nullptr;
  if (Status s = check(ncclCommSplit(comm_, colour, key, &out, nullptr), "ncclCommSplit"); !s) return s;
  int n = 0, r = 0;
  if (Status s = check(ncclCommCount(out, &n), "ncclCommCount"); !s) return s;
  if (Status s = check(ncclCommUserRank(out, &r), "ncclCommUserRank"); !s) return s;
  return std::unique_ptr<NcclComm>(new NcclComm(ctx_, out, n, r));
}

Status NcclComm::check(ncclResult_t r, const char* what) const {
  if (r == ncclSuccess) return Status::ok();
  return nccl_error(r, what, ncclGetLastError(comm_));
}

Status NcclComm::sendrecv(const void* sbuf, void* rbuf, int64_t count, DType t, int peer) {
  return exchange(sbuf, peer, rbuf, peer, count, t);
}

Status NcclComm::exchange(const void* sbuf, int to, void* rbuf, int from, int64_t count, DType t) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  if (Status s = group_start(); !s) return s;
  Status s = check(ncclSend(sbuf, static_cast<size_t>(count), *nt, to, comm_, ctx_.comm_stream()), "ncclSend");
  if (s) s = check(ncclRecv(rbuf, static_cast<size_t>(count), *nt, from, comm_, ctx_.comm_stream()), "ncclRecv");
  Status e = group_end();  // always closes the group, also after a failed enqueue
  return s ? e : s;
}

Status NcclComm::all_to_all(const void* sbuf, void* rbuf, int64_t count, DType t) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  const size_t block = static_cast<size_t>(count) * static_cast<size_t>(dtype_size(t));
  const char* in = static_cast<const char*>(sbuf);
  char* out = static_cast<char*>(rbuf);
  if (Status s = group_start(); !s) return s;
  Status s = Status::ok();
  for (int j = 0; j < nranks_ && s; ++j) {
    s = check(ncclSend(in + j * block, static_cast<size_t>(count), *nt, j, comm_, ctx_.comm_stream()), "ncclSend (all-to-all)");
    if (s) s = check(ncclRecv(out + j * block, static_cast<size_t>(count), *nt, j, comm_, ctx_.comm_stream()), "ncclRecv (all-to-all)");
  }
  Status e = group_end();  // always closes the group, also after a failed enqueue
  return s ? e : s;
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

Status NcclComm::all_reduce(const void* send, void* recv, int64_t count, DType t, ReduceOp op) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  return check(ncclAllReduce(send, recv, static_cast<size_t>(count), *nt, nccl_op(op), comm_, ctx_.comm_stream()),
                     "ncclAllReduce");
}

Status NcclComm::reduce_scatter(const void* send, void* recv, int64_t recv_count, DType t, ReduceOp op) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  return check(ncclReduceScatter(send, recv, static_cast<size_t>(recv_count), *nt, nccl_op(op), comm_,
                                       ctx_.comm_stream()),
                     "ncclReduceScatter");
}

Status NcclComm::all_gather(const void* send, void* recv, int64_t send_count, DType t) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  return check(ncclAllGather(send, recv, static_cast<size_t>(send_count), *nt, comm_, ctx_.comm_stream()),
                     "ncclAllGather");
}

Status NcclComm::broadcast(const void* send, void* recv, int64_t count, DType t, int root) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  return check(ncclBroadcast(send, recv, static_cast<size_t>(count), *nt, root, comm_, ctx_.comm_stream()),
                     "ncclBroadcast");
}

Status NcclComm::send(const void* buf, int64_t count, DType t, int peer) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  return check(ncclSend(buf, static_cast<size_t>(count), *nt, peer, comm_, ctx_.comm_stream()), "ncclSend");
}

Status NcclComm::recv(void* buf, int64_t count, DType t, int peer) {
  Result<ncclDataType_t> nt = nccl_type(t);
  if (!nt.ok()) return nt.status();
  return check(ncclRecv(buf, static_cast<size_t>(count), *nt, peer, comm_, ctx_.comm_stream()), "ncclRecv");
}

Status NcclComm::group_start() { return nccl_status(ncclGroupStart(), "ncclGroupStart"); }
Status NcclComm::group_end() { return nccl_status(ncclGroupEnd(), "ncclGroupEnd"); }

}  // namespace llmplan::exec::cuda
