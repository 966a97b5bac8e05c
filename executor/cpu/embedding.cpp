#include "executor/cpu/embedding.h"

#include <limits>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

template <class S>
void embedding_forward(const int32_t* ids, const S* table, S* out, int64_t n, int64_t h,
                       bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    assert(ids[i] >= 0);
    const S* row = table + static_cast<int64_t>(ids[i]) * h;
    S* o = out + i * h;
    if (accumulate) {
      for (int64_t j = 0; j < h; ++j) o[j] = store<S>(load(o[j]) + load(row[j]));
    } else {
      for (int64_t j = 0; j < h; ++j) o[j] = row[j];
    }
  }
}

template <class S>
void embedding_forward_shard(const int32_t* ids, const S* table, S* out, int64_t n, int64_t h, int64_t v0,
                             int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = static_cast<int64_t>(ids[i]) - v0;
    S* o = out + i * h;
    if (local >= 0 && local < rows) {
      const S* row = table + local * h;
      for (int64_t j = 0; j < h; ++j) o[j] = row[j];
    } else {
      for (int64_t j = 0; j < h; ++j) o[j] = store<S>(acc_t<S>(0));
    }
  }
}

template <class S, class G>
void embedding_backward_shard(const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h, int64_t v0,
                              int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = static_cast<int64_t>(ids[i]) - v0;
    if (local < 0 || local >= rows) continue;
    G* row = dtable + local * h;
    const S* d = dout + i * h;
    for (int64_t j = 0; j < h; ++j) row[j] = store<G>(load(row[j]) + load(d[j]));
  }
}

// The whole table is the shard of every row (valid ids: all in it).
template <class S, class G>
void embedding_backward(const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h) {
  embedding_backward_shard(ids, dout, dtable, n, h, 0, std::numeric_limits<int64_t>::max());
}

void fill_positions(int32_t* positions, int64_t b, int64_t s) {
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < s; ++t) positions[i * s + t] = static_cast<int32_t>(t);
}

#define INST(S) \
  template void embedding_forward<S>(const int32_t*, const S*, S*, int64_t, int64_t, bool); \
  template void embedding_forward_shard<S>(const int32_t*, const S*, S*, int64_t, int64_t, int64_t, int64_t);
LLMPLAN_FOR_STORAGE(INST)
#undef INST
#define INSTG(S, G) \
  template void embedding_backward<S, G>(const int32_t*, const S*, G*, int64_t, int64_t); \
  template void embedding_backward_shard<S, G>(const int32_t*, const S*, G*, int64_t, int64_t, int64_t, int64_t);
LLMPLAN_FOR_STORAGE_GRAD(INSTG)
#undef INSTG

}  // namespace llmplan::exec::cpu
