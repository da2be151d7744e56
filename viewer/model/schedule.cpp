// schedule.cpp — a pipeline's schedule from a trace, measured and ideal (schedule.hpp).
#include "viewer/model/schedule.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace distlab::viewer {

namespace {

namespace od = simdjson::ondemand;
constexpr double kInf = std::numeric_limits<double>::infinity();
using pipeline::Pass;
constexpr int kMostStages = 1 << 16;  // rows, micro-batches and chunks a trace may declare
// The ideal schedule is about P x 2vM blocks: past this many micro-batch-chunk-stages (64 MB of
// blocks) the panel shows the measured schedule on both clocks instead.
constexpr std::int64_t kMostIdealOps = std::int64_t{1} << 20;

// Busy time, bubbles and activations in flight of every stage, from its blocks (each already in
// its iteration, by start) and the iterations' extents.
void finish_times(ScheduleTimes& s) {
  const std::size_t iters = s.iterations.size();
  for (StageTimes& st : s.stages) {
    st.busy.assign(iters, 0.0);
    st.bubbles.clear();
    st.flight.clear();
    st.peak_flight = 0;
    int held = 0;
    std::size_t i = 0;
    for (std::size_t k = 0; k < iters; ++k) {
      const Interval it = s.iterations[k];
      double free_from = it.start;  // the stage is idle from here until its next block starts
      for (; i < st.blocks.size() && st.blocks[i].iteration <= static_cast<int>(k); ++i) {
        const PipeBlock& b = st.blocks[i];
        if (b.iteration < static_cast<int>(k)) continue;
        if (b.start > free_from) st.bubbles.push_back({free_from, b.start});
        free_from = std::max(free_from, b.end);
        st.busy[k] += b.end - b.start;
        // A forward's activations stay until its backward (or its W: an I still needs them for
        // the weights' gradient) is done.
        const int change = b.pass == Pass::forward                              ? 1
                           : b.pass == Pass::backward || b.pass == Pass::weight ? -1
                                                                                : 0;
        if (change == 0) continue;
        held += change;
        st.flight.push_back({b.end, held});
        st.peak_flight = std::max(st.peak_flight, held);
      }
      if (free_from < it.end) st.bubbles.push_back({free_from, it.end});
    }
  }
}

// The measured blocks: every compute span whose op is a pass (forward, backward, backward-input,
// backward-weight) and that has a micro-batch, on the row of its stage arg (its rank when it has
// none); iterations counted by the updates before.
// Where several ranks run one stage (lesson 14: its replicas and tensor-parallel ranks), the row
// is the lowest of those ranks': their blocks are the same schedule, and one row cannot overlap.
ScheduleTimes read_measured(const TraceModel& m, int& stages, int& micros, int& chunks) {
  const auto stage_of = [&m](const Span& s, const SpanArgs& a) {
    // A stage past any lesson's (a damaged trace) takes its rank's row instead.
    return a.stage >= 0 && a.stage < kMostStages ? a.stage : m.lanes[s.lane].rank;
  };
  std::map<int, int> owner;  // stage -> the lowest rank whose spans name it
  for (const Span& s : m.spans)
    if (const SpanArgs* a = s.kind == SpanKind::compute ? m.args(s) : nullptr;
        a && a->op != 0 && a->stage >= 0 && a->stage < kMostStages) {
      const int rank = m.lanes[s.lane].rank;
      auto [it, fresh] = owner.emplace(a->stage, rank);
      if (!fresh) it->second = std::min(it->second, rank);
    }
  std::vector<std::vector<PipeBlock>> blocks;
  std::vector<std::vector<double>> updates;
  const auto row = [&](int stage) -> std::size_t {
    const auto r = static_cast<std::size_t>(stage);
    if (blocks.size() <= r) blocks.resize(r + 1), updates.resize(r + 1);
    return r;
  };
  for (const Span& s : m.spans) {
    const SpanArgs* a = s.kind == SpanKind::compute ? m.args(s) : nullptr;
    if (!a || a->op == 0) continue;
    const std::string_view op = m.str(a->op);
    const int stage = stage_of(s, *a);
    if (const auto it = owner.find(a->stage);
        it != owner.end() && it->second != m.lanes[s.lane].rank)
      continue;  // another rank's copy of this stage
    const std::optional<Pass> pass = pipeline::pass_named(op);
    if (op == "update") {
      updates[row(stage)].push_back(s.start);
    } else if (pass && a->micro >= 0) {
      // A chunk past any lesson's (a damaged trace) reads as the rank's only one.
      const int chunk = a->chunk >= 0 && a->chunk < kMostStages ? a->chunk : 0;
      blocks[row(stage)].push_back({s.start, s.end(), a->micro, 0, *pass, chunk});
      micros = std::max(micros, a->micro + 1);
      chunks = std::max(chunks, chunk + 1);
    }
  }
  ScheduleTimes out;
  bool any = false;
  for (auto& list : blocks) any = any || !list.empty();
  if (!any) return out;
  stages = std::max(stages, static_cast<int>(blocks.size()));
  blocks.resize(static_cast<std::size_t>(stages));
  updates.resize(blocks.size());
  out.stages.resize(blocks.size());
  std::vector<Interval> extent;
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    auto& list = blocks[r];
    std::sort(list.begin(), list.end(),
              [](const PipeBlock& x, const PipeBlock& y) { return x.start < y.start; });
    std::sort(updates[r].begin(), updates[r].end());
    for (PipeBlock& b : list) {
      b.iteration = static_cast<int>(
          std::lower_bound(updates[r].begin(), updates[r].end(), b.start) - updates[r].begin());
      const auto k = static_cast<std::size_t>(b.iteration);
      if (extent.size() <= k) extent.resize(k + 1, {kInf, -kInf});
      extent[k].start = std::min(extent[k].start, b.start);
      extent[k].end = std::max(extent[k].end, b.end);
    }
    out.stages[r].blocks = std::move(list);
  }
  for (std::size_t k = 0; k < extent.size(); ++k)  // an iteration no stage ran: empty, in place
    if (extent[k].start > extent[k].end)
      extent[k] = k ? Interval{extent[k - 1].end, extent[k - 1].end} : Interval{0, 0};
  out.iterations = std::move(extent);
  finish_times(out);
  return out;
}

// ideal_at: per beat, its ideal time (schedule.hpp, "beats").
std::vector<double> beat_map(const TraceModel& m, const PipelineSchedule& s) {
  std::vector<double> ticks;
  for (const StageTimes& st : s.ideal.stages)
    for (const PipeBlock& b : st.blocks) ticks.push_back(b.end);
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  const double T = s.ideal_period();
  const int iters =
      std::max({s.params.iterations, static_cast<int>(s.measured.iterations.size()), 1});
  const std::size_t n = m.step_ids.size(), beats = std::max<std::size_t>(n, 1);
  std::vector<double> at(beats + 1, std::nan(""));
  const int per = s.params.steps_per_iteration;
  for (std::size_t k = 0; k < n && per > 0; ++k) {
    const std::int64_t rel = std::int64_t{m.step_ids[k]} - s.params.first_step;
    if (rel < 0 || rel / per >= iters) continue;
    const auto i = static_cast<std::size_t>(rel % per);
    if (i < ticks.size()) at[k] = static_cast<double>(rel / per) * T + ticks[i];
  }
  at.back() = iters * T;
  if (std::isnan(at[0])) at[0] = 0;
  // Beats the map does not place (a step id outside the schedule) lie evenly between those it does.
  for (std::size_t k = 1, known = 0; k < at.size(); ++k) {
    if (std::isnan(at[k])) continue;
    for (std::size_t j = known + 1; j < k; ++j)
      at[j] = at[known] +
              (at[k] - at[known]) * static_cast<double>(j - known) / static_cast<double>(k - known);
    known = k;
  }
  for (std::size_t k = 1; k < at.size(); ++k) at[k] = std::max(at[k], at[k - 1]);
  return at;
}

}  // namespace

std::string block_text(const PipeBlock& b, int chunks) {
  std::string text = fmt::format("{} of micro-batch {}", pipeline::to_string(b.pass), b.micro);
  if (chunks > 1) text += fmt::format(" (chunk {})", b.chunk);
  return text;
}

std::string block_label(const PipeBlock& b, int chunks, bool tight) {
  const char* gap = tight ? "" : " ";
  if (chunks > 1) return fmt::format("{}{}{}.{}", pipeline::letter(b.pass), gap, b.micro, b.chunk);
  return fmt::format("{}{}{}", pipeline::letter(b.pass), gap, b.micro);
}

const char* schedule_name(const PipelineParams& p) {
  return p.schedule ? pipeline::to_string(*p.schedule) : "unknown";
}

double ScheduleTimes::utilisation(int stage, int iteration) const {
  if (stage < 0 || stage >= static_cast<int>(stages.size()) || iteration < 0 ||
      iteration >= static_cast<int>(iterations.size()))
    return 0;
  const Interval it = iterations[static_cast<std::size_t>(iteration)];
  const auto& busy = stages[static_cast<std::size_t>(stage)].busy;
  const double span = it.end - it.start;
  return span > 0 && static_cast<std::size_t>(iteration) < busy.size()
             ? busy[static_cast<std::size_t>(iteration)] / span
             : 0;
}

int ScheduleTimes::iteration_at(double t) const {
  const auto it = std::upper_bound(iterations.begin(), iterations.end(), t,
                                   [](double v, const Interval& i) { return v < i.start; });
  return std::max(0, static_cast<int>(it - iterations.begin()) - 1);
}

PipelineParams parse_pipeline_params(std::string_view json) {
  PipelineParams p;
  if (json.empty()) return p;
  try {
    const simdjson::padded_string text(json);
    od::parser parser;
    od::document doc = parser.iterate(text);
    for (auto field : doc.get_object()) {
      const std::string_view key = field.unescaped_key();
      od::value v = field.value();
      const auto number = [&v] {
        double d = v.get_double();
        return d;
      };
      // Whole numbers a lesson could write; anything else (1e300, NaN) reads as -1, which the
      // checks below refuse, rather than overflowing the cast.
      const auto whole = [&number] {
        const double d = number();
        return d >= -1e9 && d <= 1e9 ? static_cast<int>(d) : -1;
      };
      if (key == "schedule") {
        p.schedule = pipeline::schedule_named(std::string_view(v.get_string()));
      } else if (key == "stages") {
        p.stages = whole();
      } else if (key == "microbatches") {
        p.microbatches = whole();
      } else if (key == "chunks") {
        p.chunks = whole();
      } else if (key == "iterations") {
        p.iterations = whole();
      } else if (key == "first_step") {
        p.first_step = whole();
      } else if (key == "steps_per_iteration") {
        p.steps_per_iteration = whole();
      }
    }
  } catch (const simdjson::simdjson_error&) {
    return PipelineParams{};
  }
  // A picture needs stages and micro-batches; a huge or negative one is not a lesson's.
  p.present = p.stages > 0 && p.stages <= kMostStages && p.microbatches > 0 &&
              p.microbatches <= kMostStages;
  if (!p.present) return PipelineParams{};
  p.iterations = std::clamp(p.iterations, 0, kMostStages);
  p.chunks = std::clamp(p.chunks, 1, kMostStages);  // absent or damaged: one chunk per rank
  return p;
}

ScheduleTimes ideal_schedule(const pipeline::Shape& shape) {
  const std::vector<std::vector<pipeline::Op>> orders = pipeline::orders_of(shape);
  const std::vector<std::vector<int>> ends =
      pipeline::ideal_ends(orders, shape.micro, shape.chunks);
  ScheduleTimes s;
  s.stages.resize(orders.size());
  double makespan = 0;
  // A unit is a stage's forward: an interleaved chunk's takes 1/v of it, so that schedules
  // stacked in one panel share the time axis (the ideal machine counts chunk forwards).
  const double unit = 1.0 / std::max(shape.chunks, 1);
  for (std::size_t r = 0; r < orders.size(); ++r)
    for (std::size_t i = 0; i < ends[r].size(); ++i) {  // the ops that ran: the order's first
      const pipeline::Op op = orders[r][i];
      const double end = ends[r][i] * unit, start = (ends[r][i] - pipeline::units(op.pass)) * unit;
      s.stages[r].blocks.push_back({start, end, op.micro, 0, op.pass, op.chunk});
      makespan = std::max(makespan, end);
    }
  s.iterations.push_back({0, makespan});
  finish_times(s);
  return s;
}

pipeline::Shape PipelineSchedule::shape() const {
  return {params.schedule.value_or(pipeline::Schedule::gpipe), stages, microbatches, chunks};
}

double PipelineSchedule::formula() const {
  return stages > 0 && microbatches > 0 ? pipeline::utilisation_formula(shape()) : 0;
}

std::string PipelineSchedule::formula_symbol() const {
  return pipeline::utilisation_symbol(shape());
}

std::string PipelineSchedule::formula_fraction() const {
  return pipeline::utilisation_fraction(shape());
}

double PipelineSchedule::ideal_time_at_beat(double beat) const {
  if (ideal_at.empty()) return 0;
  const double last = static_cast<double>(ideal_at.size() - 1);
  const double b = std::clamp(beat, 0.0, last);
  const auto k = std::min(static_cast<std::size_t>(b), ideal_at.size() - 1);
  if (k + 1 >= ideal_at.size()) return ideal_at.back();
  return ideal_at[k] + (ideal_at[k + 1] - ideal_at[k]) * (b - static_cast<double>(k));
}

double PipelineSchedule::beat_at_ideal_time(double t) const {
  if (ideal_at.size() < 2) return 0;
  if (t <= ideal_at.front()) return 0;
  if (t >= ideal_at.back()) return static_cast<double>(ideal_at.size() - 1);
  const auto k = static_cast<std::size_t>(std::upper_bound(ideal_at.begin(), ideal_at.end(), t) -
                                          ideal_at.begin() - 1);
  const double width = ideal_at[k + 1] - ideal_at[k];
  return static_cast<double>(k) + (width > 0 ? (t - ideal_at[k]) / width : 0);
}

PipelineSchedule build_pipeline_schedule(const TraceModel& model) {
  PipelineSchedule s;
  s.params = parse_pipeline_params(model.info.extra_json("pipeline"));
  s.stages = s.params.stages;
  s.microbatches = s.params.microbatches;
  s.chunks = s.params.chunks;
  int micros = 0;
  s.measured = read_measured(model, s.stages, micros, s.chunks);
  if (s.microbatches == 0) s.microbatches = micros;
  for (const StageTimes& st : s.measured.stages)
    for (const PipeBlock& b : st.blocks) s.split = s.split || b.pass == Pass::input;
  // The ideal machine replays what the lesson declares, where the schedule can run that shape.
  const pipeline::Shape declared{s.params.schedule.value_or(pipeline::Schedule::gpipe),
                                 s.params.stages, s.params.microbatches, s.params.chunks};
  if (s.params.present && s.params.schedule && pipeline::refusal(declared).empty() &&
      std::int64_t{declared.stages} * declared.micro * declared.chunks <= kMostIdealOps) {
    s.ideal = ideal_schedule(declared);
    s.split = s.split || declared.schedule == pipeline::Schedule::zb_h1;
    s.ideal.stages.resize(static_cast<std::size_t>(s.stages));  // rows the trace adds: empty
    finish_times(s.ideal);
    s.ideal_at = beat_map(model, s);
  }
  return s;
}

ScheduleMoment schedule_moment(const PipelineSchedule& s, const Moment& now) {
  ScheduleMoment p;
  p.ideal = now.clock == Clock::steps && s.has_ideal();
  if (p.ideal) {
    const double T = s.ideal_period(), t = s.ideal_time_at_beat(now.beat);
    p.iterations = std::max(1, static_cast<int>(std::lround(s.ideal_at.back() / T)));
    p.iteration = std::clamp(static_cast<int>(std::floor(t / T)), 0, p.iterations - 1);
    p.length = T;
    p.cursor = t - p.iteration * T;  // the ideal times hold one iteration, from 0
    return p;
  }
  const ScheduleTimes& times = s.measured;
  p.iterations = std::max<int>(1, static_cast<int>(times.iterations.size()));
  p.iteration = times.iteration_at(now.time_us);
  if (!times.iterations.empty()) {
    const Interval it = times.iterations[static_cast<std::size_t>(p.iteration)];
    p.t0 = it.start;
    p.length = it.end - it.start;
  }
  p.cursor = now.time_us;
  return p;
}

std::string describe_schedule(const PipelineSchedule& s, const Moment& now) {
  if (!s.any()) return "";
  const ScheduleMoment p = schedule_moment(s, now);
  const ScheduleTimes& times = p.ideal ? s.ideal : s.measured;
  std::string out = fmt::format(
      "schedule: {}, P = {}, M = {}{}: each stage busy {} = {} of an iteration on the ideal "
      "machine ({})\n",
      s.params.present ? schedule_name(s.params) : "pipeline", s.stages, s.microbatches,
      s.chunks > 1 ? fmt::format(", v = {}", s.chunks) : "", s.formula_symbol(),
      s.formula_fraction(), s.split ? "F 1 unit, I 1, W 1" : "F 1 unit, B 2");
  if (p.ideal)
    out += fmt::format("  iteration {} of {}, {:g} of {:g} units into it (the ideal schedule)\n",
                       p.iteration + 1, p.iterations, p.cursor, p.length);
  else
    out += fmt::format("  iteration {} of {}, {} into it (as measured)\n", p.iteration + 1,
                       p.iterations, format_duration(std::max(0.0, p.cursor - p.t0)));
  for (std::size_t r = 0; r < times.stages.size(); ++r) {
    if (r == 16) {
      out += fmt::format("  ... and {} more stages\n", times.stages.size() - 16);
      break;
    }
    const StageTimes& st = times.stages[r];
    const int b = block_at(st.blocks, p.cursor);
    const bool inside = p.cursor >= p.t0 && p.cursor < p.t0 + p.length;
    const std::string doing = b >= 0 ? block_text(st.blocks[static_cast<std::size_t>(b)], s.chunks)
                                     : (inside ? "idle (bubble)" : "idle");
    const int held = flight_at(st, p.cursor);
    out += fmt::format("  stage {}: {}; holds the activations of {} micro-batch{}\n", r, doing,
                       held, held == 1 ? "" : "es");
  }
  return out;
}

int flight_at(const StageTimes& stage, double t) {
  const auto it = std::upper_bound(stage.flight.begin(), stage.flight.end(), t,
                                   [](double v, const FlightPoint& p) { return v < p.t; });
  return it == stage.flight.begin() ? 0 : std::max(0, std::prev(it)->count);
}

void block_items(const std::vector<PipeBlock>& blocks, const ViewWindow& view, float min_px,
                 std::vector<BlockItem>& out) {
  out.clear();
  // Blocks of a stage never overlap: by start they are by end too.
  const auto lo = static_cast<std::size_t>(
      std::partition_point(blocks.begin(), blocks.end(),
                           [&](const PipeBlock& b) { return b.end < view.t0; }) -
      blocks.begin());
  const auto hi = static_cast<std::size_t>(
      std::partition_point(blocks.begin(), blocks.end(),
                           [&](const PipeBlock& b) { return b.start <= view.t1; }) -
      blocks.begin());
  const auto clamp_x = [&](double x) {
    return static_cast<float>(std::clamp(x, -1.0, static_cast<double>(view.width) + 1.0));
  };
  for (std::size_t i = lo; i < hi;) {
    const double x0 = view.x(blocks[i].start), x1 = view.x(blocks[i].end);
    if (x1 - x0 >= min_px) {
      out.push_back(
          {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i), clamp_x(x0), clamp_x(x1)});
      ++i;
      continue;
    }
    // A run: every block that ends within min_px of this one's start.
    const double until = view.time_at(x0 + min_px);
    auto j = static_cast<std::size_t>(
        std::partition_point(blocks.begin() + static_cast<std::ptrdiff_t>(i),
                             blocks.begin() + static_cast<std::ptrdiff_t>(hi),
                             [&](const PipeBlock& b) { return b.end <= until; }) -
        blocks.begin());
    j = std::max(j, i + 1);
    const double end_x = std::max(view.x(blocks[j - 1].end), x0 + 1.0);
    out.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j - 1), clamp_x(x0),
                   clamp_x(end_x)});
    i = j;
  }
}

void flight_columns(const StageTimes& stage, const ViewWindow& view, std::vector<int>& out) {
  const auto columns = static_cast<std::size_t>(std::max(0.0f, std::ceil(view.width)));
  out.assign(columns, 0);
  const auto& pts = stage.flight;
  auto p = static_cast<std::size_t>(
      std::upper_bound(pts.begin(), pts.end(), view.t0,
                       [](double v, const FlightPoint& q) { return v < q.t; }) -
      pts.begin());
  int now = p ? std::max(0, pts[p - 1].count) : 0;
  for (std::size_t c = 0; c < columns; ++c) {
    const double from = view.time_at(static_cast<double>(c)),
                 until = view.time_at(static_cast<double>(c + 1));
    for (; p < pts.size() && pts[p].t <= from; ++p) now = std::max(0, pts[p].count);
    int most = now;
    for (; p < pts.size() && pts[p].t < until; ++p)
      most = std::max(most, now = std::max(0, pts[p].count));
    out[c] = most;
  }
}

int block_at(const std::vector<PipeBlock>& blocks, double t) {
  const auto it = std::partition_point(blocks.begin(), blocks.end(),
                                       [&](const PipeBlock& b) { return b.end <= t; });
  return it != blocks.end() && it->start <= t ? static_cast<int>(it - blocks.begin()) : -1;
}

int bubble_at(const StageTimes& stage, double t) {
  const auto& b = stage.bubbles;
  const auto it =
      std::partition_point(b.begin(), b.end(), [&](const Interval& i) { return i.end <= t; });
  return it != b.end() && it->start <= t ? static_cast<int>(it - b.begin()) : -1;
}

}  // namespace distlab::viewer
