#include "lessons/common/mlp_options.hpp"

namespace distlab {

void add_mlp_options(CLI::App& app, MlpOptions& o) {
  app.add_option("--layers", o.layers, "hidden layers of --size units each")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--inputs", o.inputs, "the model's input size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16))
      ->capture_default_str();
  app.add_option("--outputs", o.outputs, "the model's output size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16))
      ->capture_default_str();
}

std::vector<std::size_t> mlp_dims(const MlpOptions& o, std::size_t size) {
  std::vector<std::size_t> dims{o.inputs};
  for (int l = 0; l < o.layers; ++l) dims.push_back(size);
  dims.push_back(o.outputs);
  return dims;
}

}  // namespace distlab
