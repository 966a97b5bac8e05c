#include "executor/tensor.h"

#include <cassert>
#include <cstring>
#include <utility>

#include "executor/cpu/elementwise.h"

namespace llmplan::exec {

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "?";
}

const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> d) {
  assert(d.size() <= kMaxDims);
  for (int64_t v : d) {
    assert(v >= 0);
    dims[static_cast<size_t>(rank++)] = v;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[static_cast<size_t>(i)]);
  return s + ")";
}

Result<Tensor> Tensor::empty(TrackingAllocator& alloc, Shape shape, DType dtype, Category c,
                             std::string name) {
  Result<Block> b = alloc.allocate(shape.numel() * dtype_size(dtype), c, name);
  if (!b.ok()) return b.status();
  Tensor t;
  t.block_ = std::move(b).value();
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.name_ = std::move(name);
  return t;
}

Result<Tensor> Tensor::zeros(TrackingAllocator& alloc, Shape shape, DType dtype, Category c,
                             std::string name) {
  // Host memset cannot touch device memory: device tensors are zeroed by their backend
  // (cuda::zeros), so asking here is a programming error reported as a Status, not a crash.
  if (alloc.device() != Device::cpu)
    return Status::runtime("Tensor::zeros(" + name + "): device tensors must be zeroed by their backend (cuda::zeros)");
  Result<Tensor> t = empty(alloc, shape, dtype, c, std::move(name));
  if (t.ok() && t->bytes() > 0) std::memset(t->raw(), 0, static_cast<size_t>(t->bytes()));
  return t;
}

Device Tensor::device() const {
  return block_.allocator() != nullptr ? block_.allocator()->device() : Device::cpu;
}

template <class T>
T* Tensor::data() const {
  assert(dtype_of<T> == dtype_);
  return static_cast<T*>(block_.data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template bf16_t* Tensor::data<bf16_t>() const;
template f16_t* Tensor::data<f16_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template int32_t* Tensor::data<int32_t>() const;

Status Tensor::reshape(Shape s) {
  if (s.numel() != shape_.numel()) {
    return Status::bad_input("reshape of '" + name_ + "' from " + shape_.to_string() + " to " +
                             s.to_string() + ": element counts differ");
  }
  shape_ = s;
  return Status::ok();
}

void read_f32(const Tensor& t, int64_t off, float* out, int64_t n) {
  if (n <= 0) return;
  switch (t.dtype()) {
    case DType::f32: std::memcpy(out, t.data<float>() + off, static_cast<size_t>(n) * 4); break;
    case DType::bf16: cpu::cast<bf16_t, float>(t.data<bf16_t>() + off, out, n); break;
    case DType::f16: cpu::cast<f16_t, float>(t.data<f16_t>() + off, out, n); break;
    default: break;
  }
}

void write_f32(const float* in, Tensor& t, int64_t off, int64_t n) {
  if (n <= 0) return;
  switch (t.dtype()) {
    case DType::f32: std::memcpy(t.data<float>() + off, in, static_cast<size_t>(n) * 4); break;
    case DType::bf16: cpu::cast<float, bf16_t>(in, t.data<bf16_t>() + off, n); break;
    case DType::f16: cpu::cast<float, f16_t>(in, t.data<f16_t>() + off, n); break;
    default: break;
  }
}

}  // namespace llmplan::exec
