// shard_replay.cpp — the messages of a trace replayed into each rank's chunks (shard_replay.hpp).
#include "viewer/model/shard_replay.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <map>
#include <utility>

#include "viewer/model/train_steps.hpp"

namespace distlab::viewer {

// What every moment's replay shares, built once per model (ShardReplay).
struct ShardReplay::Data {
  std::vector<int> buffer_of_string;       // string index -> buffer index, -1 none
  std::vector<const Message*> order;       // replayable messages, by (step, arrival)
  std::vector<const Message*> by_arrival;  // the same, by arrival (the measured clock)
  ShardState initial;
  TrainSteps training;  // where each training step begins; the replay starts over at each
  int world = 0;
};

namespace {

using Replay = ShardReplay::Data;

std::uint64_t bit_of(int rank) {
  return rank >= 0 && rank < 64 ? std::uint64_t{1} << rank : 0;
}

// The smallest step id replayed for a moment in training step `k`: its first step, or every
// step when the trace has no training steps (k = -1).
int first_replayed(const Replay& r, int k) {
  return k >= 0 ? r.training.first_step[static_cast<std::size_t>(k)] : INT_MIN;
}

// [first, last) chunks of buffer `b` that a message covers.
std::pair<int, int> chunk_range(const Message& m, int chunks) {
  if (m.chunk < 0) return {0, chunks};
  return {std::clamp(static_cast<int>(m.chunk), 0, chunks),
          std::clamp(static_cast<int>(std::max(m.chunk_end, m.chunk)), 0, chunks)};
}

// A buffer of more cells (ranks x chunks) than this is not replayed: a hostile or broken trace
// could otherwise claim 2^20 chunks on thousands of ranks and exhaust memory.
constexpr std::size_t kMaxShardCells = std::size_t{1} << 24;

Replay prepare(const TraceModel& model) {
  Replay r;
  r.training = train_steps(model);
  const int n = model.world_size();
  r.world = n;
  // Chunks replayed per buffer: the declared count, or 0 for a buffer too large to replay.
  std::vector<int> chunks_of;
  for (const auto& b : model.info.buffers)
    chunks_of.push_back(static_cast<std::size_t>(n) * b.chunks <= kMaxShardCells ? b.chunks : 0);
  r.buffer_of_string.assign(model.strings.size(), -1);
  for (std::size_t b = 0; b < model.info.buffers.size(); ++b)
    for (std::size_t s = 1; s < model.strings.size(); ++s)
      if (model.strings[s] == model.info.buffers[b].name && r.buffer_of_string[s] < 0)
        r.buffer_of_string[s] = static_cast<int>(b);
  auto buffer_of = [&](const Message& m) {
    return m.buffer < r.buffer_of_string.size() ? r.buffer_of_string[m.buffer] : -1;
  };

  const std::size_t nb = model.info.buffers.size();
  std::vector<bool> reduce_style(nb, false);
  // Per (buffer, rank, chunk): the first send of it and the first arrival of it at the rank.
  struct First {
    const Message* send = nullptr;
    double arrival = 1e300;
  };
  std::vector<std::vector<First>> first(nb);
  std::vector<std::vector<bool>> carried(nb);  // per (buffer, chunk): some message carries it
  for (std::size_t b = 0; b < nb; ++b) {
    first[b].resize(static_cast<std::size_t>(n) * chunks_of[b]);
    carried[b].assign(chunks_of[b], false);
  }

  for (const Message& m : model.messages) {
    const int b = buffer_of(m);
    if (b < 0 || m.src < 0 || m.dst < 0 || m.src >= n || m.dst >= n) continue;
    const int chunks = chunks_of[b];
    if (m.apply == ApplyKind::reduce) reduce_style[b] = true;
    const auto [c0, c1] = chunk_range(m, chunks);
    for (int c = c0; c < c1; ++c) {
      carried[b][c] = true;
      First& s = first[b][static_cast<std::size_t>(m.src) * chunks + c];
      if (!s.send || m.send_time < s.send->send_time) s.send = &m;
      First& d = first[b][static_cast<std::size_t>(m.dst) * chunks + c];
      d.arrival = std::min(d.arrival, m.arrival);
    }
    if (m.step >= 0) r.order.push_back(&m);
  }
  std::stable_sort(r.order.begin(), r.order.end(), [](const Message* a, const Message* b) {
    return a->step != b->step ? a->step < b->step : a->arrival < b->arrival;
  });
  r.by_arrival = r.order;
  std::stable_sort(r.by_arrival.begin(), r.by_arrival.end(),
                   [](const Message* a, const Message* b) { return a->arrival < b->arrival; });

  for (std::size_t b = 0; b < nb; ++b) {
    BufferState bs;
    bs.name = model.info.buffers[b].name;
    bs.chunks = chunks_of[b];
    bs.cells.resize(static_cast<std::size_t>(n) * bs.chunks);
    for (int rank = 0; rank < n; ++rank)
      for (int c = 0; c < bs.chunks; ++c) {
        ChunkState& cell = bs.at(rank, c);
        const First& f = first[b][static_cast<std::size_t>(rank) * bs.chunks + c];
        if (reduce_style[b]) {
          cell = {true, bit_of(rank), 1};
        } else if (f.send && f.send->send_time < f.arrival) {
          cell.held = true;
          cell.mask = f.send && f.send->contrib_mask ? f.send->contrib_mask : bit_of(rank);
          cell.count = cell.mask
                           ? std::popcount(cell.mask)
                           : std::max(1, f.send ? static_cast<int>(f.send->contributions) : 1);
        } else if (!carried[b][c] && bs.chunks == n && c == rank) {
          cell = {true, bit_of(rank), 1};  // the piece a scatter's or gather's root keeps
        }
      }
    r.initial.buffers.push_back(std::move(bs));
  }
  return r;
}

void apply(ShardState& st, const Replay& r, const Message& m, int world) {
  const int b = m.buffer < r.buffer_of_string.size() ? r.buffer_of_string[m.buffer] : -1;
  if (b < 0 || m.dst < 0 || m.dst >= world) return;
  BufferState& bs = st.buffers[b];
  const auto [c0, c1] = chunk_range(m, bs.chunks);
  for (int c = c0; c < c1; ++c) {
    ChunkState& cell = bs.at(m.dst, c);
    if (m.apply == ApplyKind::reduce) {
      cell.mask |= m.contrib_mask;
      cell.count =
          cell.mask ? std::popcount(cell.mask) : std::min(world, cell.count + m.contributions);
    } else {
      cell.mask = m.contrib_mask;
      cell.count = cell.mask ? std::popcount(cell.mask) : m.contributions;
    }
    cell.held = true;
  }
}

}  // namespace

ShardReplay::ShardReplay(const TraceModel& model)
    : data_(std::make_shared<const Data>(prepare(model))) {}

ShardState ShardReplay::at_step(int step) const {
  const Replay& r = *data_;
  ShardState st = r.initial;
  st.step = step;
  st.train_step = r.training.at_step(step);
  const int from = first_replayed(r, st.train_step);
  // The training step's first message in step order: the ones before it are an earlier
  // iteration's exchange.
  auto it = std::lower_bound(r.order.begin(), r.order.end(), from,
                             [](const Message* m, int s) { return m->step < s; });
  for (; it != r.order.end() && (*it)->step <= step; ++it) apply(st, r, **it, r.world);
  return st;
}

ShardState ShardReplay::at_time(double t_us) const {
  const Replay& r = *data_;
  ShardState st = r.initial;
  st.step = 0;
  st.train_step = r.training.at_time(t_us);
  const int from = first_replayed(r, st.train_step);
  for (const Message* m : r.by_arrival) {
    if (m->arrival > t_us) break;
    if (m->step < from) continue;  // an earlier training step's exchange
    apply(st, r, *m, r.world);
    st.step = std::max(st.step, static_cast<int>(m->step));
  }
  return st;
}

ShardReplay prepare_shard_replay(const TraceModel& model) {
  return ShardReplay(model);
}

ShardState state_at_step(const TraceModel& model, int step) {
  return ShardReplay(model).at_step(step);
}

ShardState state_at_time(const TraceModel& model, double t_us) {
  return ShardReplay(model).at_time(t_us);
}

}  // namespace distlab::viewer
