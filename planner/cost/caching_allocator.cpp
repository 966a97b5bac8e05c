#include "planner/cost/caching_allocator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace llmplan {

namespace {

struct Block {
  int segment = 0;
  double offset = 0, size = 0;
  bool free = false;
};

}  // namespace

AllocatorPeaks replay_caching_allocator(const std::vector<AllocatorOp>& ops) {
  std::vector<Block> blocks;              // every block of every segment
  std::map<std::string, size_t> live;     // tensor -> its block
  int segments = 0;
  AllocatorPeaks peaks;
  double allocated = 0;
  for (const AllocatorOp& op : ops) {
    if (op.allocate) {
      // Best fit among the free blocks (the smallest that holds the request).
      size_t best = blocks.size();
      for (size_t i = 0; i < blocks.size(); ++i)
        if (blocks[i].free && blocks[i].size >= op.size && (best == blocks.size() || blocks[i].size < blocks[best].size)) best = i;
      size_t at = best;
      if (best == blocks.size()) {
        blocks.push_back({segments++, 0, op.size, false});
        at = blocks.size() - 1;
        peaks.reserved += op.size;
      } else {
        const Block taken = blocks[best];
        if (taken.size > op.size) blocks.push_back({taken.segment, taken.offset + op.size, taken.size - op.size, true});  // the split-off rest
        blocks[best].size = op.size;
        blocks[best].free = false;
      }
      live[op.tensor] = at;
      allocated += op.size;
      peaks.allocated = std::max(peaks.allocated, allocated);
    } else {
      auto it = live.find(op.tensor);
      if (it == live.end()) continue;  // REQUIRES excludes it
      Block& b = blocks[it->second];
      b.free = true;
      allocated -= b.size;
      live.erase(it);
      // Merge free neighbours within the segment.
      for (bool merged = true; merged;) {
        merged = false;
        for (size_t i = 0; i < blocks.size() && !merged; ++i)
          for (size_t k = 0; k < blocks.size() && !merged; ++k) {
            if (i == k || !blocks[i].free || !blocks[k].free || blocks[i].segment != blocks[k].segment) continue;
            if (blocks[i].offset + blocks[i].size != blocks[k].offset || blocks[k].size == 0) continue;
            blocks[i].size += blocks[k].size;
            blocks[k].size = 0;  // an empty block: never chosen (size 0 < any request), never merged
            merged = true;
          }
      }
    }
  }
  return peaks;
}

Result<std::vector<AllocatorOp>> parse_allocator_ops(const std::vector<std::string>& text, const std::string& field) {
  std::vector<AllocatorOp> ops;
  std::map<std::string, bool> alive;
  for (size_t i = 0; i < text.size(); ++i) {
    const std::string& t = text[i];
    const std::string where = field + "[" + std::to_string(i) + "]";
    std::istringstream in(t);
    std::string head;
    in >> head;
    if (head.size() < 2 || (head[0] != '+' && head[0] != '-'))
      return Status::bad_input(where + ": expected \"+NAME SIZE\" (allocate) or \"-NAME\" (free), got '" + t + "'");
    AllocatorOp op;
    op.allocate = head[0] == '+';
    op.tensor = head.substr(1);
    if (op.allocate) {
      if (!(in >> op.size) || !std::isfinite(op.size) || op.size <= 0 || op.size > 1e6)
        return Status::bad_input(where + ": expected a positive size after '" + head + "', got '" + t + "'");
      if (alive[op.tensor]) return Status::bad_input(where + ": '" + op.tensor + "' is allocated again while live");
      alive[op.tensor] = true;
    } else {
      if (!alive[op.tensor]) return Status::bad_input(where + ": '" + op.tensor + "' is freed but not live");
      alive[op.tensor] = false;
    }
    std::string rest;
    if (in >> rest) return Status::bad_input(where + ": unexpected '" + rest + "' in '" + t + "'");
    ops.push_back(op);
  }
  return ops;
}

}  // namespace llmplan
