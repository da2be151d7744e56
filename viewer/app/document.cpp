// document.cpp — loading a trace into a Document, and its cached shard state.
#include "viewer/app/document.hpp"

#include <exception>
#include <filesystem>

namespace distlab::viewer {

std::string Document::title() const {
  std::string t = std::filesystem::path(path).filename().string();
  if (ok() && !model.info.lesson.empty() && t.find(model.info.lesson) == std::string::npos)
    t += " (" + model.info.lesson + ")";
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
  Document d;
  d.path = path;
  try {
    d.model = load_trace_model(path);
    d.playback.reset(d.model);
  } catch (const std::exception& e) {
    d.error = e.what();
  }
  return d;
}

}  // namespace distlab::viewer
