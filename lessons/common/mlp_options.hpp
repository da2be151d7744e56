// mlp_options.hpp — the model's shape as the training lessons take it (05, 08-10): --layers
// hidden layers of --size units each, between --inputs and --outputs.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <vector>

namespace distlab {

struct MlpOptions {
  int layers = 2;  // hidden layers
  std::size_t inputs = 16, outputs = 8;
};

// Adds --layers, --inputs and --outputs, with `o`'s values as the defaults.
void add_mlp_options(CLI::App& app, MlpOptions& o);

// The model's dims: {inputs, `size` for each hidden layer, outputs}.
std::vector<std::size_t> mlp_dims(const MlpOptions& o, std::size_t size);

}  // namespace distlab
