// Tensor: a dense, row-major array of up to 4 dimensions that owns its storage.
//
// A Tensor is a Shape, a DType, a name and a Block from a TrackingAllocator (which fixes
// its device and memory category). It is move-only: the storage is freed, and un-counted
// from the allocator, exactly when the owning Tensor is destroyed or reset(), so live bytes
// are exact at every point of a step. Its byte size is numel * dtype_size, with no padding
// (the allocator's accounting equals the recipe's formula). Ops take raw pointers
// (data<T>()) plus dimensions; a Tensor is only the owner and the label.
//
// Thread-safety: a plain value; concurrent reads are fine, writes need external care.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "executor/allocator.h"
#include "executor/dtype.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

inline constexpr int kMaxDims = 4;

struct Shape {
  int rank = 0;                        // 0..4; rank 0 is a scalar (numel 1)
  std::array<int64_t, kMaxDims> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);  // REQUIRES: at most 4 entries, each >= 0
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string to_string() const;  // e.g. "(2, 128, 768)"
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Uninitialised storage of shape.numel() * dtype_size(dtype) bytes counted under c.
  // Fails (allocator's OOM status) without side effects; `name` appears in the report.
  static Result<Tensor> empty(TrackingAllocator& alloc, Shape shape, DType dtype, Category c,
                              std::string name = {});
  // As empty(), filled with zero bytes (0.0 in every float format).
  static Result<Tensor> zeros(TrackingAllocator& alloc, Shape shape, DType dtype, Category c,
                              std::string name = {});

  bool defined() const { return block_.allocator() != nullptr; }
  void reset() { block_.reset(); }  // free now; the tensor becomes undefined
  void recategorize(Category c) { block_.recategorize(c); }  // Block::recategorize

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return block_.bytes(); }
  Category category() const { return block_.category(); }
  Device device() const;
  const std::string& name() const { return name_; }

  void* raw() const { return block_.data(); }
  // REQUIRES: dtype_of<T> == dtype() (checked by assert).
  template <class T> T* data() const;

  // Same storage seen with another shape. Fails (bad_input) when numel differs.
  Status reshape(Shape s);

 private:
  Block block_;
  Shape shape_;
  DType dtype_ = DType::f32;
  std::string name_;
};

// Host tensors of f32, bf16 or f16 (other dtypes: no-op): elements [off, off + n) of t
// converted to f32 into out, or out's f32 values rounded (nearest even) into t. n <= 0: no-op.
void read_f32(const Tensor& t, int64_t off, float* out, int64_t n);
void write_f32(const float* in, Tensor& t, int64_t off, int64_t n);

}  // namespace llmplan::exec
