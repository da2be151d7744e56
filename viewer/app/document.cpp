// document.cpp — loading a trace into a Document, and its cached shard state.
#include "viewer/app/document.hpp"

#include <exception>
#include <filesystem>
#include <system_error>

#include "viewer/model/pytorch_trace.hpp"

namespace distlab::viewer {

std::string Document::title() const {
  std::string t = std::filesystem::path(path).filename().string();
  if (t.empty()) t = std::filesystem::path(path).parent_path().filename().string();  // "dir/"
  if (ok() && !model.info.lesson.empty() && t.find(model.info.lesson) == std::string::npos)
    t += " (" + model.info.lesson + ")";
  if (ok() && model.info.source == "pytorch")
    t += " (PyTorch, " + std::to_string(model.world_size()) + " ranks)";
  return t;
}

const ShardState& Document::shards(const Moment& at) {
  const double key = at.clock == Clock::steps ? static_cast<double>(at.step) : at.time_us;
  if (!shards_valid_ || shards_clock_ != at.clock || shards_key_ != key) {
    shards_ = shards_at(derived<ShardReplay>(prepare_shard_replay), at);
    shards_valid_ = true;
    shards_clock_ = at.clock;
    shards_key_ = key;
  }
  return shards_;
}

Document open_document(const std::string& path) {
  return open_document(std::vector<std::string>{path});
}

Document open_document(const std::vector<std::string>& paths) {
  Document d;
  d.path = paths.empty() ? std::string() : paths.front();
  std::error_code ec;
  const bool run =
      paths.size() > 1 || (!paths.empty() && std::filesystem::is_directory(paths[0], ec));
  try {
    d.model = run ? load_trace_set(paths) : load_trace_model(d.path);
    d.playback.reset(d.model);
  } catch (const std::exception& e) {
    d.error = e.what();
  }
  return d;
}

}  // namespace distlab::viewer
