// document.hpp — one open trace in the viewer: its model, where playback stands, what is
// selected, and the panels' view state. The View (view.hpp) holds one or several.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <typeindex>

#include "viewer/model/playback.hpp"
#include "viewer/model/shard_replay.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// What the user clicked; highlighted in every panel that shows it.
struct Selection {
  int message = -1;  // index into TraceModel::messages
  int span = -1;     // index into TraceModel::spans
  void clear() { message = span = -1; }
};

// The Timeline panel's window onto the trace, in trace microseconds.
struct TimelineState {
  double view_begin = 0, view_end = 0;
  bool fit = true;  // fit to all on the next frame (set on load and by the "fit" button)
};

struct Document {
  std::string path;
  std::string error;  // non-empty when the trace did not load: shown instead of the panels
  TraceModel model;
  Playback playback;
  Selection selection;
  TimelineState timeline;

  bool ok() const { return error.empty(); }
  std::string title() const;  // the file name, and the lesson when the trace names one

  // The shard state at a moment, cached: replaying is linear in the messages, and the same
  // moment is drawn by several panels and, paused, frame after frame.
  const ShardState& shards(const Moment& at);

  // What a panel derives from the model once (an index, totals, a layout), built on first use
  // and kept with the document, one per type: it lives and dies with the model it was built
  // from, so no panel keeps caches keyed by a model's address.
  template <class T>
  T& derived(T (*build)(const TraceModel&)) {
    std::shared_ptr<void>& slot = derived_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>(build(model));
    return *static_cast<T*>(slot.get());
  }

 private:
  std::map<std::type_index, std::shared_ptr<void>> derived_;
  ShardState shards_;
  bool shards_valid_ = false;
  Clock shards_clock_ = Clock::steps;
  double shards_key_ = 0;
};

// Loads a trace, or a run of PyTorch profiler traces (several files, or a folder:
// pytorch_trace.hpp, group_trace_args); a trace that fails to load gives a Document with
// `error` set (never throws).
Document open_document(const std::string& path);
Document open_document(const std::vector<std::string>& paths);

}  // namespace distlab::viewer
