// PyTorch's CUDA caching allocator, for the large blocks that dominate a step's peaks: what
// it reserves from the device (cudaMalloc'd segments it keeps) against what is allocated.
// A freed block stays reserved and is handed to a later request it can hold; a request no
// free block can hold gets a new segment. So a sequence of large allocations whose sizes
// grow (the 16-bit logits, then fp32 copies of them) leaves the device with more reserved
// than was ever allocated at once -- what torch.cuda.max_memory_reserved() and nvidia-smi
// report, and what torchtitan logs as a run's memory.
//
// The model follows c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x) for the large pool:
//   - a request takes the smallest free cached block at least its size (get_free_block:
//     pool.blocks.lower_bound, best fit), split when larger (should_split: the remainder
//     stays a free block of the same segment; max_split_size unlimited by default);
//   - with none, a new segment of the request's size (alloc_block; its 2 MiB rounding is
//     nothing at the sizes modelled here);
//   - a free merges the block with its free neighbours in the segment (try_merge_blocks);
//   - segments are not returned to the device (no empty_cache, no OOM retry).
// Sizes are in any unit (the planner uses bytes per logit). Pure function.
#pragma once

#include <string>
#include <vector>

#include "planner/spec/status.h"

namespace llmplan {

struct AllocatorOp {
  bool allocate = true;  // false: free
  std::string tensor;    // names the block: a free names an earlier allocation
  double size = 0;       // allocations only
};

struct AllocatorPeaks {
  double allocated = 0;  // largest sum of live blocks
  double reserved = 0;   // segments held at the end (= their largest sum: none is released)
};

// REQUIRES: every free names a live allocation; sizes > 0 (parse_allocator_ops checks both).
AllocatorPeaks replay_caching_allocator(const std::vector<AllocatorOp>& ops);

// Ops from their text form, one per string: "+NAME SIZE" allocates, "-NAME" frees
// ("+logits 2", "-logits"). bad_input naming `field` and the op on a malformed op, a free of
// a tensor not live, a size not positive, or a tensor allocated twice while live.
Result<std::vector<AllocatorOp>> parse_allocator_ops(const std::vector<std::string>& text, const std::string& field);

}  // namespace llmplan
