// sequence_parallel.hpp — what lessons 12 and 13 share under --sequence-parallel (Megatron-SP;
// Korthikanti et al., 2022): a block as a transformer runs it, O = Dropout(Layer(LN(X))), its
// LayerNorm and dropout regions cut along the tokens. Here: the dropout's mask, the LayerNorm in
// float64 (values, and the magnitudes an error model needs), and the report that holds a
// sequence-parallel run against the same block run the tensor-parallel way: bytes per pass (an
// all-gather and a reduce-scatter against one all-reduce) and the regions' activations (1/N).
// The collectives themselves are tensor_parallel.hpp's (sp_all_gather, sp_reduce_scatter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/runtime.hpp"
#include "core/training/tensor_parallel.hpp"

namespace distlab::tp {

inline constexpr float kLayerNormEps = 1e-5f;

// The dropout's mask, (rows x h): element i is kept (1/(1 - p)) or dropped (0) by the seed and
// `stream` alone, so every rank, and the reference, draws the same mask for a row wherever it
// runs.
std::vector<float> dropout_mask(std::uint64_t seed, int stream, std::size_t rows, std::size_t h,
                                double p);

// The LayerNorm's gain, around 1, and bias, from the seed (streams gain_stream, bias_stream).
std::vector<float> layernorm_gain(std::uint64_t seed, int stream, std::size_t h);

// LayerNorm over each row of x (T x h) in float64: U = xhat gamma + beta, xhat = (x - mu) rstd.
struct LayerNormReference {
  RowMatrix u, xhat;
  Eigen::VectorXd mean, rstd;
};
LayerNormReference layernorm_reference(const RowMatrix& x, const RowMatrix& gamma,
                                       const RowMatrix& beta);
// U's magnitudes, the sum of its terms' absolute values: |gamma| rstd (|x - mu| + |mu|) + |beta|.
RowMatrix layernorm_magnitudes(const LayerNormReference& ln, const RowMatrix& x,
                               const RowMatrix& gamma, const RowMatrix& beta);

// The LayerNorm's backward from dU: dX = rstd (g - mean(g) - xhat mean(g xhat)), g = dU gamma,
// dgamma = the column sums of dU xhat, dbeta those of dU. With `magnitudes`, the same formulas
// on absolute values (every minus a plus), for an error model: du is then a magnitude too.
struct LayerNormGrads {
  RowMatrix dx, dgamma, dbeta;
};
LayerNormGrads layernorm_backward_reference(const LayerNormReference& ln, const RowMatrix& gamma,
                                            const RowMatrix& du, bool magnitudes = false);

// The Splits panel's blocks under sequence parallelism: f (all-gather forward, reduce-scatter
// backward), g (reduce-scatter forward, all-gather backward), and a (T x h) activation cut along
// its rows (the tokens) over n ranks, such as LN(X) and O.
SplitBlock sp_f_block();
SplitBlock sp_g_block();
SplitBlock token_rows_block(std::string name, std::size_t tokens, std::size_t hidden, int n);

// The LayerNorm and dropout regions of a block, on a rank's rows [r0, r0 + rows) of the T
// tokens (all of them without sequence parallelism): my rows of X, the LayerNorm's statistics,
// the dropout's mask, the output O and the gradient dX live on a ledger of their own, which also
// charges the rank's (`record_peak` writes its peak, kRegionBytes); the LayerNorm's gain and bias
// are whole (params). x, mask and gamma, beta: the whole tensors, from which it keeps its rows.
class NormRegions {
 public:
  NormRegions(Comm& comm, const std::vector<float>& x, const std::vector<float>& mask,
              const std::vector<float>& gamma, const std::vector<float>& beta, std::size_t r0,
              std::size_t rows, std::size_t hidden);
  NormRegions(const NormRegions&) = delete;
  NormRegions& operator=(const NormRegions&) = delete;

  // U's rows = LN(X's rows), in a phase "LayerNorm (my rows)".
  void layernorm(View<float> u_mine);
  // O = mask y_mine (in the caller's phase).
  void dropout(View<const float> y_mine);
  // dy_mine = mask (my rows of d_o, the whole dO) (in the caller's phase).
  void dropout_backward(View<float> dy_mine, const std::vector<float>& d_o);
  // dX (my rows), d_gamma and d_beta (set, not added to) from du_mine, in a phase
  // "LayerNorm' (my rows)".
  void layernorm_backward(View<const float> du_mine, View<float> d_gamma, View<float> d_beta);
  void record_peak();

  View<float> output() { return O_.view(); }
  View<float> input_grad() { return dX_.view(); }

 private:
  Buffer<float> region(std::size_t count);
  Comm& comm_;
  std::size_t r0_, rows_, h_;
  Ledger ledger_;
  Buffer<float> G_, Be_, X_, mean_, rstd_, M_, O_, dX_;
};

// What one run of a normalised block measured, for the report: the step ids of its collectives
// (f_forward and g_backward are all-gathers, g_forward and f_backward reduce-scatters under
// sequence parallelism; g_forward and f_backward all-reduces without), and rank 0's comparisons.
struct NormOutcome {
  bool sequence_parallel = false;
  AllReduceSteps f_forward, g_forward, g_backward, f_backward, replicated;
  std::vector<Compared> compared;
  std::string error_measure;
};

// The value (trace "value" event) each rank records: the peak of the ledger its LayerNorm and
// dropout regions' activations live on.
inline constexpr const char* kRegionBytes = "LayerNorm and dropout regions' activation bytes";

// The report of a --sequence-parallel run `r` against `tp_run`, the same block on as many ranks
// without sequence parallelism: bytes per rank of each pass from both traces (an all-gather and
// a reduce-scatter of T x h floats against one ring all-reduce), the `replicated` parameters'
// all-reduce (`replicated_what`: `formula` = `replicated_floats` floats), and the regions' ledger
// peaks against T/N x (4h + 2) floats (my rows of X, the mean and 1/std, the mask, O and dX).
// Checks each on `r`, and that tp_run verified.
void report_sequence_parallel(RunResult& r, const RunResult& tp_run, const NormOutcome& sp,
                              const NormOutcome& plain, std::size_t rows, std::size_t hidden,
                              const std::string& replicated_what, const std::string& formula,
                              std::size_t replicated_floats);

}  // namespace distlab::tp
