// model.cpp — the MLP, loss and optimizers on the ops interface (model.hpp).
#include "core/training/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/base/check.hpp"
#include "core/base/units.hpp"

namespace distlab::model {

// --- shape -------------------------------------------------------------------------------------

std::size_t MlpShape::weight_offset(std::size_t l) const {
  std::size_t offset = 0;
  for (std::size_t k = 0; k < l; ++k) offset += dims[k] * dims[k + 1] + dims[k + 1];
  return offset;
}
std::size_t MlpShape::bias_offset(std::size_t l) const {
  return weight_offset(l) + dims[l] * dims[l + 1];
}
std::size_t MlpShape::params() const {
  return weight_offset(layers());
}

std::string MlpShape::describe() const {
  std::string s;
  for (std::size_t d : dims) s += (s.empty() ? "" : " -> ") + std::to_string(d);
  return fmt::format("{} ({} parameters)", s, format_count(params()));
}

MlpShape make_shape(std::vector<std::size_t> dims) {
  if (dims.size() < 2) throw UsageError("a model needs an input and an output size");
  for (std::size_t d : dims)
    if (d == 0) throw UsageError("every layer of the model needs at least one unit");
  return MlpShape{std::move(dims)};
}

// --- layers ------------------------------------------------------------------------------------

void linear_forward(View<float> y, In<float> x, In<float> w, In<float> b, In<float> ones,
                    std::size_t batch, std::size_t in, std::size_t out) {
  ops::gemm(y, x, w, batch, out, in);                              // y = x W
  ops::gemm(y, ones, b, batch, out, 1, false, false, 1.0f, 1.0f);  // y += ones b^T
}

void linear_backward(View<float> dx, View<float> dw, View<float> db, In<float> dy, In<float> x,
                     In<float> w, std::size_t batch, std::size_t in, std::size_t out) {
  ops::gemm(dw, x, dy, in, out, batch, /*trans_a=*/true);                            // dW = x^T dy
  ops::col_sums(db, dy, batch, out);                                                 // db = 1^T dy
  if (dx.size() > 0) ops::gemm(dx, dy, w, batch, in, out, false, /*trans_b=*/true);  // dx = dy W^T
}

void mse_loss(View<float> loss, View<float> dy, In<float> y, In<float> t, std::size_t whole,
              std::size_t out) {
  DL_CHECK(whole > 0 && out > 0, "mse_loss: the batch and the output need at least one element");
  DL_CHECK(dy.ptr != y.ptr && dy.ptr != t.ptr, "mse_loss: dy may not alias y or t");
  const auto count = static_cast<float>(whole * out);
  ops::copy(dy, y);
  ops::axpy(dy, -1.0f, t);  // dy = y - t
  // L = (y - t) . (y - t) / count, as a (1 x n) (n x 1) product.
  ops::gemm(loss, In<float>(dy), In<float>(dy), 1, 1, dy.size(), false, false, 1.0f / count, 0.0f);
  ops::scale(dy, 2.0f / count);
}

// --- the MLP -----------------------------------------------------------------------------------

Mlp::Mlp(Ledger& ledger, Device device, MlpShape shape, std::size_t batch, bool activate_output)
    : shape_(std::move(shape)),
      batch_(batch),
      activate_output_(activate_output),
      ledger_(&ledger),
      device_(device) {
  DL_CHECK(batch_ > 0, "an MLP needs a batch of at least one sample");
  ones_ = Buffer<float>(ledger, Category::activations, batch_, device);
  ops::fill(ones_.view(), 1.0f);
  std::size_t widest = shape_.in();
  for (std::size_t l = 0; l < shape_.layers(); ++l) {
    const std::size_t width = shape_.dims[l + 1];
    widest = std::max(widest, width);
    z_.emplace_back(ledger, Category::activations, batch_ * width, device);
    h_.emplace_back(ledger, Category::activations, activated(l) ? batch_ * width : 0, device);
  }
  dz_ = Buffer<float>(ledger, Category::activations, batch_ * widest, device);
  dh_ = Buffer<float>(ledger, Category::activations, batch_ * widest, device);
}

View<const float> Mlp::forward(In<float> params, In<float> x) {
  ops::detail::check_size("Mlp::forward", "params", params.size(), shape_.params());
  for (std::size_t l = 0; l < shape_.layers(); ++l) {
    const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
    forward_layer(l, params.sub(shape_.weight_offset(l), in * out),
                  params.sub(shape_.bias_offset(l), out), x);
  }
  return output();
}

void Mlp::forward_layer(std::size_t l, In<float> w, In<float> b, In<float> x) {
  ops::detail::check_size("Mlp::forward", "x", x.size(), batch_ * shape_.in());
  const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
  const View<const float> input = l == 0 ? x : View<const float>(h_[l - 1].view());
  linear_forward(z_[l].view(), input, w, b, ones_.view(), batch_, in, out);
  if (activated(l)) ops::gelu_forward(h_[l].view(), In<float>(z_[l].view()));
}

void Mlp::backward(View<float> grads, In<float> params, In<float> x, In<float> dy, View<float> dx) {
  ops::detail::check_size("Mlp::backward", "grads", grads.size(), shape_.params());
  View<const float> dz = dy;  // dL/dz of layer l: the loss's gradient for the last layer
  if (activate_output_) {     // through the output's gelu first
    ops::detail::check_size("Mlp::backward", "dy", dy.size(), batch_ * shape_.out());
    View<float> top = dz_.view().sub(0, batch_ * shape_.out());
    ops::gelu_backward(top, dy, In<float>(z_.back().view()));
    dz = top;
  }
  for (std::size_t l = shape_.layers(); l-- > 0;) {
    const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
    dz = backward_layer(
        l, grads.sub(shape_.weight_offset(l), in * out), grads.sub(shape_.bias_offset(l), out),
        params.sub(shape_.weight_offset(l), in * out), x, dz, l == 0 ? dx : View<float>{});
  }
}

void Mlp::backward_input(In<float> params, In<float> dy, View<float> dx) {
  ops::detail::check_size("Mlp::backward_input", "dy", dy.size(), batch_ * shape_.out());
  if (kept_dz_.empty())
    for (std::size_t l = 0; l < shape_.layers(); ++l)
      kept_dz_.emplace_back(*ledger_, Category::activations, batch_ * shape_.dims[l + 1], device_);
  for (std::size_t l = shape_.layers(); l-- > 0;) {
    const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
    View<float> dz = kept_dz_[l].view();
    if (l + 1 < shape_.layers() || activate_output_) {  // through this layer's gelu
      const View<const float> dh =
          l + 1 < shape_.layers() ? View<const float>(dh_.view().sub(0, batch_ * out)) : dy;
      ops::gelu_backward(dz, dh, In<float>(z_[l].view()));
    } else {
      ops::copy(dz, dy);
    }
    View<float> below = l == 0 ? dx : dh_.view().sub(0, batch_ * in);
    if (below.size() > 0)  // dh = dz W^T, as linear_backward computes it
      ops::gemm(below, In<float>(dz), params.sub(shape_.weight_offset(l), in * out), batch_, in,
                out, false, /*trans_b=*/true);
  }
}

void Mlp::backward_weights(View<float> grads, In<float> x) {
  ops::detail::check_size("Mlp::backward_weights", "grads", grads.size(), shape_.params());
  DL_CHECK(!kept_dz_.empty(), "Mlp::backward_weights: run backward_input first");
  for (std::size_t l = 0; l < shape_.layers(); ++l) {
    const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
    const View<const float> input = l == 0 ? x : View<const float>(h_[l - 1].view());
    const View<const float> dz = kept_dz_[l].view();
    ops::gemm(grads.sub(shape_.weight_offset(l), in * out), input, dz, in, out, batch_,
              /*trans_a=*/true);                                            // dW = x^T dz
    ops::col_sums(grads.sub(shape_.bias_offset(l), out), dz, batch_, out);  // db = 1^T dz
  }
}

View<const float> Mlp::backward_layer(std::size_t l, View<float> dw, View<float> db, In<float> w,
                                      In<float> x, In<float> dz, View<float> dx) {
  const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
  ops::detail::check_size("Mlp::backward", "dz", dz.size(), batch_ * out);
  const View<const float> input = l == 0 ? x : View<const float>(h_[l - 1].view());
  View<float> dh = l == 0 ? dx : dh_.view().sub(0, batch_ * in);  // layer 0: the input's, if asked
  linear_backward(dh, dw, db, dz, input, w, batch_, in, out);
  if (l == 0) return {};
  View<float> next = dz_.view().sub(0, batch_ * in);
  ops::gelu_backward(next, In<float>(dh), In<float>(z_[l - 1].view()));  // through h = gelu(z)
  return next;
}

// --- optimizers --------------------------------------------------------------------------------

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adam") return OptimizerKind::adam;
  throw UsageError(fmt::format("--optimizer '{}' is not one of sgd, adam", name));
}

const char* to_string(OptimizerKind k) {
  return k == OptimizerKind::sgd ? "sgd" : "adam";
}

Optimizer::Optimizer(Ledger& ledger, Device device, std::size_t n, OptimizerConfig config)
    : config_(config) {
  const std::size_t state = config_.kind == OptimizerKind::adam ? n : 0;
  m_ = Buffer<float>(ledger, Category::optimizer, state, device);
  v_ = Buffer<float>(ledger, Category::optimizer, state, device);
}

}  // namespace distlab::model
