// distlab_ops_bench — the ops (core/ops/ops.hpp) against what the same machine gives in the same
// run.
//
// Elementwise ops and reductions are memory-bound: their yardstick is a plain copy of the same
// size (cudaMemcpyAsync device to device on a GPU, memcpy on the CPU). GB/s counts every byte
// an op must read and write (add: read dst and src, write dst = 3 x size), so "vs copy" is the
// fraction of the copy's bandwidth the op reaches.
// GEMMs are compute-bound: their yardstick is the library on the same shape, called directly
// (cublasGemmEx in its own column-major terms on a GPU; Eigen in f32 on the CPU). TFLOP/s is
// 2 m n k / time.
//
//   time    median of --iters timed calls after --warmup untimed ones; on a GPU, events recorded
//           on the rank's stream around each call (the GPU's time, not the launch's)
//   size    bytes of one f32 operand (a bf16 operand of the same element count is half)
//
// Run:  distlab_ops_bench --device cuda              1 MiB .. 256 MiB, GEMM at TP shapes
//       distlab_ops_bench --device cpu               1 MiB .. 16 MiB, small GEMMs
//       distlab_ops_bench --device cuda --check      exit 1 unless add and axpy reach 80% of the
//                                                    copy at the largest size and every GEMM 70%
//                                                    of the library (scripts/gpu-check.sh)
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/half.hpp"
#include "core/base/units.hpp"
#include "core/device/allocator.hpp"
#include "core/device/buffer.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"
#include "core/ops/ops.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/device/cublas_library.hpp"
#endif

using namespace distlab;

namespace {

constexpr double kCopyTarget = 0.80;  // add and axpy: at least this fraction of the copy's GB/s
constexpr double kGemmTarget = 0.70;  // ops::gemm: at least this fraction of the library's TFLOP/s

struct Settings {
  Device device = Device::cpu;
  int warmup = 3, iters = 20;
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

#ifdef DISTLAB_HAVE_CUDA
cudaStream_t rank_stream() {
  return static_cast<cudaStream_t>(cuda_stream());
}

// Two events on the rank's stream, around one call.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    DL_CUDA_CHECK(cudaEventCreate(&start));
    DL_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};
#endif

// Seconds per call of fn: the median of s.iters timed calls after s.warmup untimed ones.
double time_it(const Settings& s, const std::function<void()>& fn) {
  for (int i = 0; i < s.warmup; ++i) fn();
  std::vector<double> seconds;
#ifdef DISTLAB_HAVE_CUDA
  if (s.device == Device::cuda) {
    EventPair events;
    for (int i = 0; i < s.iters; ++i) {
      DL_CUDA_CHECK(cudaEventRecord(events.start, rank_stream()));
      fn();
      DL_CUDA_CHECK(cudaEventRecord(events.stop, rank_stream()));
      DL_CUDA_CHECK(cudaEventSynchronize(events.stop));
      float ms = 0;
      DL_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
      seconds.push_back(ms * 1e-3);
    }
    return median(seconds);
  }
#endif
  for (int i = 0; i < s.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(seconds);
}

// The yardstick: copy `bytes` from src to dst as the platform does it best.
void plain_copy(Device device, void* dst, const void* src, std::size_t bytes) {
#ifdef DISTLAB_HAVE_CUDA
  if (device == Device::cuda) {
    DL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, rank_stream()));
    return;
  }
#endif
  (void)device;
  std::memcpy(dst, src, bytes);
}

// --- elementwise and reductions --------------------------------------------------------------

struct Result {
  std::string op, type;
  std::size_t size = 0;
  double moved = 0, seconds = 0, vs_copy = 0;
  double gbps() const { return moved / seconds / 1e9; }
};

// Every memory-bound op at one size; the copy first, the others as a fraction of it.
std::vector<Result> bench_size(const Settings& s, std::size_t bytes) {
  Ledger ledger;
  const std::size_t n = bytes / sizeof(float);
  const Device dev = s.device;
  Buffer<float> x(ledger, Category::data, n, dev), y(ledger, Category::data, n, dev),
      z(ledger, Category::data, n, dev), m(ledger, Category::optimizer, n, dev),
      v(ledger, Category::optimizer, n, dev), total(ledger, Category::data, 1, dev);
  Buffer<BFloat16> h(ledger, Category::data, n, dev), k(ledger, Category::data, n, dev);
  // Values near 1 (and 0 for y): nothing overflows in a few dozen calls, no CPU denormals.
  ops::fill(x.view(), 1.0f);
  ops::fill(y.view(), 0.0f);
  ops::fill(z.view(), 0.5f);
  ops::fill(m.view(), 0.0f);
  ops::fill(v.view(), 0.0f);
  ops::fill(h.view(), BFloat16(1.0f));
  ops::fill(k.view(), BFloat16(0.0f));
  const std::size_t cols = std::min<std::size_t>(n, 4096), rows = n / cols;  // n is a power of 2
  Buffer<float> sums(ledger, Category::data, rows, dev);
  int step = 0;
  const double S = double(bytes);

  struct Case {
    const char* op;
    const char* type;
    double moved;  // bytes read + written, in units of one f32 operand
    std::function<void()> run;
  };
  const std::vector<Case> cases = {
      {"copy", "f32", 2, [&] { plain_copy(dev, y.data(), x.data(), bytes); }},
      {"fill", "f32", 1, [&] { ops::fill(y.view(), 0.0f); }},
      {"add", "f32", 3, [&] { ops::add(y.view(), x.view()); }},
      {"axpy", "f32", 3, [&] { ops::axpy(y.view(), 1e-3f, x.view()); }},
      {"scale", "f32", 2, [&] { ops::scale(z.view(), 0.999f); }},  // not 1: x * 1 folds away
      {"gelu_forward", "f32", 2, [&] { ops::gelu_forward(y.view(), x.view()); }},
      {"gelu_backward", "f32", 3, [&] { ops::gelu_backward(y.view(), z.view(), x.view()); }},
      {"cast", "f32>bf16", 1.5, [&] { ops::cast(h.view(), x.view()); }},
      {"add", "bf16", 1.5, [&] { ops::add(k.view(), h.view()); }},
      {"adam_step", "f32", 7,
       [&] { ops::adam_step(z.view(), x.view(), m.view(), v.view(), {.lr = 1e-6f}, ++step); }},
      {"sum", "f32", 1, [&] { ops::sum(total.view(), x.view()); }},
      {"row_sums", "f32", 1, [&] { ops::row_sums(sums.view(), x.view(), rows, cols); }},
      {"softmax_rows", "f32", 2, [&] { ops::softmax_rows(y.view(), x.view(), rows, cols); }},
  };
  std::vector<Result> out;
  for (const auto& c : cases) {
    Result r{c.op, c.type, bytes, c.moved * S, time_it(s, c.run), 0};
    r.vs_copy = out.empty() ? 1.0 : r.gbps() / out.front().gbps();
    out.push_back(r);
  }
  return out;
}

// --- GEMM ------------------------------------------------------------------------------------

struct GemmShape {
  std::size_t m, n, k;
  bool trans_a;
  bool bf16;
  const char* what;
};

struct GemmResult {
  GemmShape shape;
  double ours_s = 0, library_s = 0;
  double flops() const { return 2.0 * double(shape.m) * double(shape.n) * double(shape.k); }
  double ratio() const { return library_s / ours_s; }
};

// The library on the same shape, in its own terms. cuBLAS: column-major C (m, n) = op(A) B with
// lda = rows of A as stored; the natural call, so a slower configuration picked by ops::gemm's
// row-major swap would show. CPU: Eigen's product on f32 maps.
template <class T>
void library_gemm(const Settings& s, void* handle, View<T> c, View<const T> a, View<const T> b,
                  const GemmShape& g) {
#ifdef DISTLAB_HAVE_CUDA
  if (s.device == Device::cuda) {
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t type = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
    const int m = int(g.m), n = int(g.n), k = int(g.k);
    DL_CUBLAS_CHECK(cublas().gemm_ex(static_cast<cublasHandle_t>(handle),
                                     g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
                                     &alpha, a.ptr, type, g.trans_a ? k : m, b.ptr, type, k, &beta,
                                     c.ptr, type, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
#endif
  (void)s;
  (void)handle;
  if constexpr (std::is_same_v<T, float>) {
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
    const auto idx = [](std::size_t v) { return static_cast<Eigen::Index>(v); };
    const Eigen::Map<const Matrix> A(a.ptr, idx(g.trans_a ? g.k : g.m), idx(g.trans_a ? g.m : g.k));
    const Eigen::Map<const Matrix> B(b.ptr, idx(g.k), idx(g.n));
    Eigen::Map<Matrix> C(c.ptr, idx(g.m), idx(g.n));
    if (g.trans_a)
      C.noalias() = A.transpose() * B;
    else
      C.noalias() = A * B;
  }
}

template <class T>
GemmResult bench_gemm_typed(const Settings& s, void* handle, const GemmShape& g) {
  Ledger ledger;
  Buffer<T> a(ledger, Category::params, g.m * g.k, s.device),
      b(ledger, Category::activations, g.k * g.n, s.device),
      c(ledger, Category::activations, g.m * g.n, s.device);
  ops::fill(a.view(), T(0.01f));
  ops::fill(b.view(), T(0.01f));
  GemmResult r{g};
  r.ours_s =
      time_it(s, [&] { ops::gemm(c.view(), a.view(), b.view(), g.m, g.n, g.k, g.trans_a, false); });
  if (s.device == Device::cuda || std::is_same_v<T, float>) {
    r.library_s = time_it(s, [&] { library_gemm<T>(s, handle, c.view(), a.view(), b.view(), g); });
  } else {  // the CPU has no bf16 library: Eigen in f32 on the same shape
    Buffer<float> a32(ledger, Category::params, g.m * g.k),
        b32(ledger, Category::activations, g.k * g.n),
        c32(ledger, Category::activations, g.m * g.n);
    r.library_s =
        time_it(s, [&] { library_gemm<float>(s, handle, c32.view(), a32.view(), b32.view(), g); });
  }
  return r;
}

GemmResult bench_gemm(const Settings& s, void* handle, const GemmShape& g) {
  return g.bf16 ? bench_gemm_typed<BFloat16>(s, handle, g) : bench_gemm_typed<float>(s, handle, g);
}

// Tensor-parallel shapes: a square layer, and an MLP's up-projection (8192 tokens x 4096 hidden
// into 16384) with its weight gradient (A^T dY: tokens summed away).
std::vector<GemmShape> gemm_shapes(Device device) {
  if (device == Device::cuda)
    return {{4096, 4096, 4096, false, false, "square"},
            {4096, 4096, 4096, false, true, "square"},
            {8192, 16384, 4096, false, false, "mlp up"},
            {8192, 16384, 4096, false, true, "mlp up"},
            {4096, 16384, 8192, true, true, "mlp dW = X^T dY"}};
  return {{256, 256, 256, false, false, "square"},
          {256, 256, 256, false, true, "square"},
          {512, 1024, 256, true, false, "dW = X^T dY"}};
}

// --- the report ------------------------------------------------------------------------------

void print_elementwise(const std::vector<Result>& rows) {
  fmt::print(
      "\n# memory-bound ops: GB/s counts the bytes each op must read and write; vs copy is the "
      "fraction\n"
      "# of the copy's GB/s at the same size\n");
  fmt::print("{:>10}  {:<14} {:<9} {:>12} {:>11} {:>9} {:>8}\n", "size", "op", "type", "moved",
             "time", "GB/s", "vs copy");
  fmt::print("{:>10}  {:<14} {:<9} {:>12} {:>11} {:>9} {:>8}\n", "(f32 B)", "", "", "(B)", "(us)",
             "", "");
  for (const auto& r : rows)
    fmt::print("{:>10}  {:<14} {:<9} {:>12} {:>11.1f} {:>9.1f} {:>8.2f}\n",
               format_bytes(double(r.size)), r.op, r.type, format_bytes(r.moved), r.seconds * 1e6,
               r.gbps(), r.vs_copy);
}

void print_gemms(const std::vector<GemmResult>& rows, Device device) {
  const char* library = device == Device::cuda ? "cuBLAS" : "Eigen f32";
  fmt::print(
      "\n# gemm, row-major C (m, n) = op(A) B; TFLOP/s = 2 m n k / time; library = {} on the same "
      "shape\n",
      library);
  fmt::print("{:>6} {:>6} {:>6} {:>3}  {:<5} {:<16} {:>10} {:>9} {:>10} {:>9} {:>7}\n", "m", "n",
             "k", "A^T", "type", "shape", "ops (ms)", "TFLOP/s", "lib (ms)", "TFLOP/s", "ratio");
  for (const auto& r : rows)
    fmt::print(
        "{:>6} {:>6} {:>6} {:>3}  {:<5} {:<16} {:>10.3f} {:>9.2f} {:>10.3f} {:>9.2f} {:>7.2f}\n",
        r.shape.m, r.shape.n, r.shape.k, r.shape.trans_a ? "yes" : "no",
        r.shape.bf16 ? "bf16" : "f32", r.shape.what, r.ours_s * 1e3, r.flops() / r.ours_s / 1e12,
        r.library_s * 1e3, r.flops() / r.library_s / 1e12, r.ratio());
}

// One line per target, starting with the op's name (scripts/gpu-check.sh greps "^add " and
// "^axpy "); returns whether all were met.
bool print_targets(const std::vector<Result>& largest, const std::vector<GemmResult>& gemms) {
  fmt::print("\n");
  bool ok = true;
  for (const char* op : {"add", "axpy"})
    for (const auto& r : largest)
      if (r.op == op && r.type == std::string("f32")) {
        const bool met = r.vs_copy >= kCopyTarget;
        ok = ok && met;
        fmt::print("{:<5} f32 {}: {:.1f} GB/s = {:.2f} of copy (target >= {:.2f}): {}\n", op,
                   format_bytes(double(r.size)), r.gbps(), r.vs_copy, kCopyTarget,
                   met ? "ok" : "BELOW");
      }
  for (const auto& g : gemms) {
    const bool met = g.ratio() >= kGemmTarget;
    ok = ok && met;
    fmt::print(
        "gemm  {} {}x{}x{}{}: {:.2f} TFLOP/s = {:.2f} of the library (target >= {:.2f}): {}\n",
        g.shape.bf16 ? "bf16" : "f32", g.shape.m, g.shape.n, g.shape.k,
        g.shape.trans_a ? " (A^T)" : "", g.flops() / g.ours_s / 1e12, g.ratio(), kGemmTarget,
        met ? "ok" : "BELOW");
  }
  return ok;
}

int run(const Settings& s, std::size_t min_bytes, std::size_t max_bytes, bool gemm, bool check) {
  fmt::print("distlab_ops_bench: device {}, {} timed calls after {} warm-up, median\n",
             to_string(s.device), s.iters, s.warmup);
  // Sizes from min_bytes by factors of 4, and max_bytes itself last: the targets are read there.
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = min_bytes; bytes < max_bytes; bytes *= 4) sizes.push_back(bytes);
  sizes.push_back(max_bytes);
  std::vector<Result> all, largest;
  for (const std::size_t bytes : sizes) {
    largest = bench_size(s, bytes);
    all.insert(all.end(), largest.begin(), largest.end());
  }
  print_elementwise(all);

  std::vector<GemmResult> gemms;
  if (gemm) {
    void* handle = nullptr;
#ifdef DISTLAB_HAVE_CUDA
    cublasHandle_t h = nullptr;
    if (s.device == Device::cuda) {
      DL_CUBLAS_CHECK(cublas().create(&h));
      DL_CUBLAS_CHECK(cublas().set_stream(h, rank_stream()));
      // The math mode ops::gemm's handle has (cuda/gemm.cu): one rounding per element.
      DL_CUBLAS_CHECK(cublas().set_math_mode(
          h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                       CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
      handle = h;
    }
#endif
    for (const auto& shape : gemm_shapes(s.device)) gemms.push_back(bench_gemm(s, handle, shape));
#ifdef DISTLAB_HAVE_CUDA
    if (h) cublas().destroy(h);
#endif
    print_gemms(gemms, s.device);
  }
  const bool ok = print_targets(largest, gemms);
  return check && !ok ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "distlab_ops_bench: the ops' GB/s against a copy of the same size, GEMM against the library");
  std::string device_text = "auto", min_text = "1M", max_text;
  Settings s;
  bool check = false, no_gemm = false;
  app.add_option("--device", device_text, "auto, cpu or cuda")->capture_default_str();
  app.add_option("--min-bytes", min_text, "smallest f32 operand (K, M, G: powers of 1024)")
      ->capture_default_str();
  app.add_option("--max-bytes", max_text, "largest f32 operand (default 256M on cuda, 16M on cpu)");
  app.add_option("--iters", s.iters, "timed calls per op and size")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "untimed calls first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_flag("--no-gemm", no_gemm, "skip the GEMMs");
  app.add_flag("--check", check,
               "exit 1 unless add and axpy reach 80% of the copy's GB/s at the largest size and "
               "every GEMM 70% of "
               "the library's TFLOP/s");
  CLI11_PARSE(app, argc, argv);

  bool bound = false;
  try {
    s.device = resolve_device(device_text);
    if (max_text.empty()) max_text = s.device == Device::cuda ? "256M" : "16M";
    const std::size_t min_bytes = parse_size(min_text), max_bytes = parse_size(max_text);
    const auto power_of_two = [](std::size_t v) { return v >= 16 && (v & (v - 1)) == 0; };
    if (!power_of_two(min_bytes) || !power_of_two(max_bytes) || max_bytes < min_bytes)
      throw UsageError(fmt::format(
          "--min-bytes and --max-bytes must be powers of two from 16 up, min <= max (got {} "
          "and {})",
          min_bytes, max_bytes));
    if (s.device == Device::cuda) {
      cuda_bind_rank(0);
      bound = true;
    }
    const int rc = run(s, min_bytes, max_bytes, !no_gemm, check);
    if (bound) cuda_unbind_rank();
    return rc;
  } catch (const UsageError& e) {
    fmt::print(stderr, "distlab_ops_bench: {}\n", e.what());
    return 2;
  } catch (const Error& e) {
    if (bound) cuda_unbind_rank();
    fmt::print(stderr, "distlab_ops_bench: {}\n", e.what());
    return 1;
  }
}
