// elementwise_cpu.cpp — the float32 add every all-reduce spends its gamma on (ops.hpp's
// detail::add_f32), compiled twice: for AVX2 and for the baseline x86-64 the build targets. The
// loader picks the one this CPU runs (GCC's target_clones); small messages feel the difference,
// as the MPI library's own reduction is vectorised the same way. One add per element, no FMA:
// the sum has the same bits on every path.
#include <cstddef>

#include "core/ops/ops.hpp"

namespace distlab::ops::detail {

// Not under the sanitizers: the loader runs the clones' resolver before their runtime is up,
// and an instrumented resolver crashes the program at load (TSan, seen here).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
void add_f32(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace distlab::ops::detail
