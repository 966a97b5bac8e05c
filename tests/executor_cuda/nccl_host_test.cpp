// The NCCL side without a GPU: the element-type mapping covers every DType the executor
// has, and NCCL errors become runtime Status values naming the call and NCCL's message.
#include <gtest/gtest.h>

#include <string>

#include "executor/cuda/nccl_comm.h"

namespace llmplan::exec::cuda {
namespace {

TEST(NcclHost, EveryDTypeHasItsNcclType) {
  const struct {
    DType t;
    ncclDataType_t n;
  } pairs[] = {{DType::f32, ncclFloat32}, {DType::f64, ncclFloat64}, {DType::bf16, ncclBfloat16},
               {DType::f16, ncclFloat16}, {DType::i32, ncclInt32},   {DType::u8, ncclUint8}};
  for (const auto& p : pairs) {
    Result<ncclDataType_t> r = nccl_type(p.t);
    ASSERT_TRUE(r.ok()) << to_string(p.t);
    EXPECT_EQ(*r, p.n) << to_string(p.t);
  }
  EXPECT_EQ(std::size(pairs), 6u);  // DType: f32, f64, bf16, f16, u8, i32
}

TEST(NcclHost, ErrorsNameTheCallAndNcclsMessage) {
  const Status s = nccl_error(ncclInvalidArgument, "ncclAllReduce");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.kind(), ErrorKind::runtime);
  EXPECT_EQ(s.message(), std::string("ncclAllReduce: ") + ncclGetErrorString(ncclInvalidArgument));
  const Status d = nccl_error(ncclSystemError, "ncclCommInitRank", "socket closed");
  EXPECT_EQ(d.message(), std::string("ncclCommInitRank: ") + ncclGetErrorString(ncclSystemError) + " (socket closed)");
}

}  // namespace
}  // namespace llmplan::exec::cuda
