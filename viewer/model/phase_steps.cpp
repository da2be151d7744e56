// phase_steps.cpp — numbered phases and which ranks are in them (phase_steps.hpp).
#include "viewer/model/phase_steps.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>

namespace distlab::viewer {

namespace {

// "4 push & sum" -> 4; -1 when the name is not a number, a space and something more.
int step_number(std::string_view name) {
  std::size_t i = 0;
  int n = 0;
  while (i < name.size() && i < 4 && std::isdigit(static_cast<unsigned char>(name[i])))
    n = n * 10 + (name[i++] - '0');
  if (i == 0 || i + 1 >= name.size() || name[i] != ' ') return -1;
  return n;
}

}  // namespace

std::vector<PhaseStep> phase_steps(const TraceModel& m) {
  std::map<std::uint32_t, std::size_t> index;  // name string id -> steps entry
  std::vector<PhaseStep> steps;
  for (const Span& s : m.spans) {
    if (s.kind != SpanKind::compute) continue;
    auto it = index.find(s.name);
    if (it == index.end()) {
      const int number = step_number(m.str(s.name));
      if (number < 0) continue;
      it = index.emplace(s.name, steps.size()).first;
      steps.push_back({number, std::string(m.str(s.name)), {}});
    }
    const int rank = s.lane < m.lanes.size() ? m.lanes[s.lane].rank : 0;
    steps[it->second].intervals.push_back({s.start, s.end(), rank});
  }
  for (PhaseStep& p : steps)
    std::sort(p.intervals.begin(), p.intervals.end(),
              [](const PhaseStep::Interval& a, const PhaseStep::Interval& b) {
                return a.start < b.start;
              });
  // by number; first appearance breaks ties (spans are sorted per lane, so by earliest start)
  std::stable_sort(steps.begin(), steps.end(), [](const PhaseStep& a, const PhaseStep& b) {
    return a.number != b.number ? a.number < b.number
                                : a.intervals.front().start < b.intervals.front().start;
  });
  return steps;
}

std::vector<PhaseState> phase_states(const std::vector<PhaseStep>& steps, const Moment& at) {
  std::vector<PhaseState> out(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i)
    for (const PhaseStep::Interval& v : steps[i].intervals) {
      if (v.start > at.time_us) break;
      if (at.time_us < v.end) {
        if (std::find(out[i].ranks.begin(), out[i].ranks.end(), v.rank) == out[i].ranks.end())
          out[i].ranks.push_back(v.rank);
      } else {
        out[i].passed = true;
      }
    }
  for (PhaseState& s : out) std::sort(s.ranks.begin(), s.ranks.end());
  return out;
}

}  // namespace distlab::viewer
