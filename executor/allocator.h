// TrackingAllocator: every byte the executor holds comes from one of these, tagged with a
// memory Category, so the measured breakdown can be compared with the planner's
// prediction to the byte.
//
// Accounting counts the exact requested bytes (not the rounded size the backend really
// reserves). It records, per category and in total: live bytes, peak bytes; the overall
// peak with its per-category breakdown and the phase it happened in; and per Phase
// (set by the runner) the peak of total live bytes while that phase was current, with the
// breakdown at that moment. Memory live when a phase begins counts toward that phase.
//
// allocate() returns a Block: a move-only RAII handle that frees (and un-counts) itself
// when destroyed, so live bytes are exact at every point. With a limit set, an allocation
// that would take total live bytes above it fails with a runtime Status naming phase,
// category, requested and live bytes; last_oom() keeps the same facts as data. A backend
// failure (out of host memory) is reported the same way.
//
// Backends (CpuAllocator here; a CUDA caching allocator later) implement only
// raw_allocate/raw_free; the accounting lives in this base class and is shared.
// REQUIRES: the allocator outlives every Block it handed out.
// Thread-safety: none; one thread allocates and frees (wrap externally otherwise).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "executor/dtype.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

enum class Category : uint8_t {
  weights, gradients, optimizer_states, master_weights, activations, logits_loss, workspace,
  communication,
  gathered_params,  // ZeRO-3: a unit's full parameters all-gathered for its forward/backward
};
inline constexpr int kCategories = 9;
enum class Phase : uint8_t { forward, backward, optimizer, other };
inline constexpr int kPhases = 4;

const char* to_string(Category c);  // "weights", "gradients", ... (the enumerator names)
const char* to_string(Phase p);     // "forward", "backward", "optimizer", "other"

using CategoryBytes = std::array<int64_t, kCategories>;  // bytes, indexed by Category

struct PhasePeak {
  int64_t total = 0;       // bytes: max total live while the phase was current
  CategoryBytes at_peak{}; // bytes: per-category live at that moment
  bool seen = false;       // the phase was ever current
};

struct MemoryStats {
  CategoryBytes live{};           // bytes live now
  CategoryBytes peak{};           // bytes: each category's own maximum
  int64_t live_total = 0;         // bytes
  int64_t peak_total = 0;         // bytes: maximum of live_total
  CategoryBytes at_peak{};        // bytes: per-category live at the overall peak
  Phase peak_phase = Phase::other;
  std::array<PhasePeak, kPhases> phase{};  // indexed by Phase
  int64_t allocations = 0;        // successful allocate() calls, including zero-byte ones
  int64_t frees = 0;
};

struct OomReport {
  Phase phase = Phase::other;
  Category category = Category::workspace;
  std::string what;          // the caller's name for the allocation, may be empty
  int64_t requested = 0;     // bytes
  int64_t live_total = 0;    // bytes live before the request
  int64_t limit = 0;         // bytes; 0 when the backend itself ran out
  CategoryBytes live{};      // bytes live per category before the request
  std::string message() const;  // one line, e.g. "out of memory in backward: ..."
};

class TrackingAllocator;

// Memory owned by whoever holds the Block; freed on destruction or reset().
class Block {
 public:
  Block() = default;
  Block(Block&& o) noexcept;
  Block& operator=(Block&& o) noexcept;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() { reset(); }

  void reset();  // free now; the Block becomes empty
  // Counts the same bytes under `c` from now on (live total unchanged; the per-category
  // peaks see the move). For memory that changes role in place, e.g. the logits that a
  // split backward keeps as the LM head's output gradient for its weight-gradient pass.
  void recategorize(Category c);
  void* data() const { return data_; }  // 64-byte aligned; nullptr for an empty or 0-byte block
  int64_t bytes() const { return bytes_; }
  Category category() const { return category_; }
  TrackingAllocator* allocator() const { return owner_; }

 private:
  friend class TrackingAllocator;
  Block(TrackingAllocator* owner, void* data, int64_t bytes, Category c)
      : owner_(owner), data_(data), bytes_(bytes), category_(c) {}
  TrackingAllocator* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Category category_ = Category::workspace;
};

class TrackingAllocator {
 public:
  virtual ~TrackingAllocator() = default;
  virtual Device device() const = 0;

  // REQUIRES: bytes >= 0. On success the Block holds `bytes` bytes (64-byte aligned,
  // uninitialised) counted under `c`; on failure nothing changes but last_oom().
  Result<Block> allocate(int64_t bytes, Category c, std::string_view what = {});

  void set_phase(Phase p);  // the runner marks phase boundaries
  Phase phase() const { return phase_; }
  void set_limit(int64_t bytes) { limit_ = bytes; }  // 0 = no limit. Default: 0
  int64_t limit() const { return limit_; }
  const MemoryStats& stats() const { return stats_; }
  // Peaks (overall, per category, per phase) restart from what is live now.
  void reset_peaks();
  const std::optional<OomReport>& last_oom() const { return last_oom_; }

 protected:
  // Backend: at least `bytes` bytes, 64-byte aligned, or nullptr. Never called with 0.
  virtual void* raw_allocate(int64_t bytes) = 0;
  virtual void raw_free(void* p, int64_t bytes) = 0;

 private:
  friend class Block;
  void release(void* p, int64_t bytes, Category c);
  void move_bytes(int64_t bytes, Category from, Category to);
  void note_peaks();
  Status fail(int64_t bytes, Category c, std::string_view what);

  MemoryStats stats_;
  Phase phase_ = Phase::other;
  int64_t limit_ = 0;
  std::optional<OomReport> last_oom_;
};

// Host memory from std::aligned_alloc (size rounded up to 64 bytes for the call only).
class CpuAllocator final : public TrackingAllocator {
 public:
  Device device() const override { return Device::cpu; }

 protected:
  void* raw_allocate(int64_t bytes) override;
  void raw_free(void* p, int64_t bytes) override;
};

}  // namespace llmplan::exec
