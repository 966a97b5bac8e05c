#include "executor/allocator.h"

#include <cstdlib>
#include <utility>

namespace llmplan::exec {

const char* to_string(Category c) {
  switch (c) {
    case Category::weights: return "weights";
    case Category::gradients: return "gradients";
    case Category::optimizer_states: return "optimizer_states";
    case Category::master_weights: return "master_weights";
    case Category::activations: return "activations";
    case Category::logits_loss: return "logits_loss";
    case Category::workspace: return "workspace";
    case Category::communication: return "communication";
    case Category::gathered_params: return "gathered_params";
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::other: return "other";
  }
  return "?";
}

std::string OomReport::message() const {
  std::string m = "out of memory in phase " + std::string(to_string(phase)) + ": allocating " +
                  std::to_string(requested) + " bytes of " + to_string(category);
  if (!what.empty()) m += " (" + what + ")";
  m += " with " + std::to_string(live_total) + " bytes live";
  if (limit > 0) {
    m += " of a " + std::to_string(limit) + "-byte limit";
  } else {
    m += "; the backend refused";
  }
  m += " [";
  bool first = true;
  for (int c = 0; c < kCategories; ++c) {
    if (live[c] == 0) continue;
    m += (first ? "" : ", ") + std::string(to_string(static_cast<Category>(c))) + " " +
         std::to_string(live[c]);
    first = false;
  }
  return m + "]";
}

// ---------------------------------------------------------------- Block

Block::Block(Block&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      category_(o.category_) {}

Block& Block::operator=(Block&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    category_ = o.category_;
  }
  return *this;
}

void Block::reset() {
  if (owner_ != nullptr) owner_->release(data_, bytes_, category_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

void Block::recategorize(Category c) {
  if (owner_ != nullptr) owner_->move_bytes(bytes_, category_, c);
  category_ = c;
}

// ---------------------------------------------------------------- TrackingAllocator

Result<Block> TrackingAllocator::allocate(int64_t bytes, Category c, std::string_view what) {
  if (bytes < 0) return Status::bad_input("allocate: negative size " + std::to_string(bytes));
  if (limit_ > 0 && stats_.live_total + bytes > limit_) return fail(bytes, c, what);
  void* p = nullptr;
  if (bytes > 0) {
    p = raw_allocate(bytes);
    if (p == nullptr) return fail(bytes, c, what);
  }
  const int ci = static_cast<int>(c);
  stats_.live[ci] += bytes;
  stats_.live_total += bytes;
  stats_.allocations += 1;
  note_peaks();
  return Block(this, p, bytes, c);
}

void TrackingAllocator::release(void* p, int64_t bytes, Category c) {
  if (p != nullptr) raw_free(p, bytes);
  stats_.live[static_cast<int>(c)] -= bytes;
  stats_.live_total -= bytes;
  stats_.frees += 1;
}

void TrackingAllocator::move_bytes(int64_t bytes, Category from, Category to) {
  stats_.live[static_cast<int>(from)] -= bytes;
  stats_.live[static_cast<int>(to)] += bytes;
  note_peaks();
}

void TrackingAllocator::note_peaks() {
  for (int c = 0; c < kCategories; ++c) {
    if (stats_.live[c] > stats_.peak[c]) stats_.peak[c] = stats_.live[c];
  }
  if (stats_.live_total > stats_.peak_total) {
    stats_.peak_total = stats_.live_total;
    stats_.at_peak = stats_.live;
    stats_.peak_phase = phase_;
  }
  PhasePeak& pp = stats_.phase[static_cast<int>(phase_)];
  if (!pp.seen || stats_.live_total > pp.total) {
    pp.total = stats_.live_total;
    pp.at_peak = stats_.live;
    pp.seen = true;
  }
}

void TrackingAllocator::set_phase(Phase p) {
  phase_ = p;
  note_peaks();
}

void TrackingAllocator::reset_peaks() {
  stats_.peak = stats_.live;
  stats_.peak_total = stats_.live_total;
  stats_.at_peak = stats_.live;
  stats_.peak_phase = phase_;
  stats_.phase = {};
  note_peaks();
}

Status TrackingAllocator::fail(int64_t bytes, Category c, std::string_view what) {
  OomReport r;
  r.phase = phase_;
  r.category = c;
  r.what = std::string(what);
  r.requested = bytes;
  r.live_total = stats_.live_total;
  r.limit = limit_ > 0 && stats_.live_total + bytes > limit_ ? limit_ : 0;
  r.live = stats_.live;
  Status s = Status::runtime(r.message());
  last_oom_ = std::move(r);
  return s;
}

// ---------------------------------------------------------------- CpuAllocator

void* CpuAllocator::raw_allocate(int64_t bytes) {
  const auto rounded = static_cast<size_t>((bytes + 63) / 64 * 64);  // aligned_alloc wants a multiple
  return std::aligned_alloc(64, rounded);
}

void CpuAllocator::raw_free(void* p, int64_t /*bytes*/) { std::free(p); }

}  // namespace llmplan::exec
