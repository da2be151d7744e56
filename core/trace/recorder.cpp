// Binary form of a RankLog, so MPI ranks can ship their logs to rank 0 at the end.
#include "core/trace/recorder.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <type_traits>

#include "core/base/check.hpp"

namespace distlab {

namespace {

class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    pod(static_cast<std::uint64_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<char> out;
};

class Reader {
 public:
  explicit Reader(const std::vector<char>& in) : in_(in) {}
  template <class T>
  T pod() {
    T v;
    DL_CHECK(pos_ + sizeof(T) <= in_.size(), "truncated rank log");
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = pod<std::uint64_t>();
    DL_CHECK(pos_ + n <= in_.size(), "truncated rank log");
    std::string s(in_.data() + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  const std::vector<char>& in_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<char> serialize(const RankLog& log) {
  Writer w;
  w.pod(log.rank);
  w.str(log.host);
  w.pod(log.clock_offset_us);
  w.pod(log.clock_error_us);
  w.pod(log.t_start);
  w.pod(log.t_end);
  w.pod(static_cast<std::uint64_t>(log.spans.size()));
  for (const auto& e : log.spans) {
    w.pod(e.kind);
    w.pod(e.lane);
    w.str(e.name);
    w.pod(e.t0);
    w.pod(e.t1);
    w.pod(e.peer);
    w.pod(e.tag);
    w.pod(e.bytes);
    w.pod(e.seq);
    w.pod(e.meta.step);
    w.str(e.meta.buffer);
    w.pod(e.meta.chunk_begin);
    w.pod(e.meta.chunk_end);
    w.pod(e.meta.apply);
    w.pod(e.meta.contributions);
    w.pod(e.meta.contrib_mask);
    w.str(e.meta.group);
    w.str(e.phase.op);
    w.pod(e.phase.micro);
    w.pod(e.phase.stage);
    w.pod(e.phase.chunk);
    w.str(e.phase.text);
  }
  w.pod(static_cast<std::uint64_t>(log.counters.size()));
  for (const auto& c : log.counters) w.pod(c);
  w.pod(static_cast<std::uint64_t>(log.steps.size()));
  for (const auto& s : log.steps) w.pod(s);
  w.pod(static_cast<std::uint64_t>(log.values.size()));
  for (const auto& v : log.values) {
    w.pod(v.ts);
    w.str(v.name);
    w.pod(v.value);
  }
  w.pod(static_cast<std::uint64_t>(log.checks.size()));
  for (const auto& c : log.checks) {
    w.str(c.name);
    w.pod(c.ok);
    w.str(c.detail);
  }
  w.pod(static_cast<std::uint64_t>(log.buffers.size()));
  for (const auto& b : log.buffers) {
    w.str(b.name);
    w.pod(b.length);
    w.pod(b.chunks);
  }
  w.pod(log.peak);
  w.pod(log.peak_total);
  return std::move(w.out);
}

RankLog deserialize(const std::vector<char>& bytes) {
  Reader r(bytes);
  RankLog log;
  log.rank = r.pod<int>();
  log.host = r.str();
  log.clock_offset_us = r.pod<double>();
  log.clock_error_us = r.pod<double>();
  log.t_start = r.pod<double>();
  log.t_end = r.pod<double>();
  log.spans.resize(r.pod<std::uint64_t>());
  for (auto& e : log.spans) {
    e.kind = r.pod<SpanEvent::Kind>();
    e.lane = r.pod<Lane>();
    e.name = r.str();
    e.t0 = r.pod<double>();
    e.t1 = r.pod<double>();
    e.peer = r.pod<int>();
    e.tag = r.pod<int>();
    e.bytes = r.pod<std::uint64_t>();
    e.seq = r.pod<std::uint64_t>();
    e.meta.step = r.pod<int>();
    e.meta.buffer = r.str();
    e.meta.chunk_begin = r.pod<int>();
    e.meta.chunk_end = r.pod<int>();
    e.meta.apply = r.pod<Apply>();
    e.meta.contributions = r.pod<int>();
    e.meta.contrib_mask = r.pod<std::uint64_t>();
    e.meta.group = r.str();
    e.phase.op = r.str();
    e.phase.micro = r.pod<int>();
    e.phase.stage = r.pod<int>();
    e.phase.chunk = r.pod<int>();
    e.phase.text = r.str();
  }
  log.counters.resize(r.pod<std::uint64_t>());
  for (auto& c : log.counters) c = r.pod<CounterEvent>();
  log.steps.resize(r.pod<std::uint64_t>());
  for (auto& s : log.steps) s = r.pod<StepEvent>();
  log.values.resize(r.pod<std::uint64_t>());
  for (auto& v : log.values) {
    v.ts = r.pod<double>();
    v.name = r.str();
    v.value = r.pod<double>();
  }
  log.checks.resize(r.pod<std::uint64_t>());
  for (auto& c : log.checks) {
    c.name = r.str();
    c.ok = r.pod<bool>();
    c.detail = r.str();
  }
  log.buffers.resize(r.pod<std::uint64_t>());
  for (auto& b : log.buffers) {
    b.name = r.str();
    b.length = r.pod<std::uint64_t>();
    b.chunks = r.pod<int>();
  }
  log.peak = r.pod<std::array<std::int64_t, kCategories>>();
  log.peak_total = r.pod<std::int64_t>();
  return log;
}

int align_clocks(std::vector<RankLog>& logs) {
  // 1. One clock per host: the estimate with the smallest error among its ranks.
  std::map<std::string, int> host_index;
  std::vector<int> host_of(logs.size());
  std::vector<double> offset, error;
  int fixed = -1;  // rank 0's host
  for (std::size_t i = 0; i < logs.size(); ++i) {
    const RankLog& log = logs[i];
    auto [it, fresh] = host_index.emplace(log.host, static_cast<int>(offset.size()));
    const auto h = static_cast<std::size_t>(it->second);
    if (fresh) {
      offset.push_back(log.clock_offset_us);
      error.push_back(log.clock_error_us);
    } else if (log.clock_error_us < error[h]) {
      offset[h] = log.clock_offset_us;
      error[h] = log.clock_error_us;
    }
    host_of[i] = it->second;
    if (log.rank == 0) fixed = it->second;
  }
  if (fixed >= 0) offset[std::size_t(fixed)] = error[std::size_t(fixed)] = 0;

  // 2. Per (sending host, receiving host): the least time from a send's start to its receive's
  // end on the hosts' clocks, over every message between them.
  std::map<MessageKey, std::pair<int, double>> sent;  // host, start on rank 0's clock
  for (std::size_t i = 0; i < logs.size(); ++i)
    for (const auto& e : logs[i].spans)
      if (e.kind == SpanEvent::Kind::send)
        sent[message_key(logs[i].rank, e)] = {host_of[i], e.t0 + offset[std::size_t(host_of[i])]};
  std::map<std::pair<int, int>, double> least;
  for (std::size_t i = 0; i < logs.size(); ++i)
    for (const auto& e : logs[i].spans) {
      if (e.kind != SpanEvent::Kind::recv) continue;
      auto it = sent.find(message_key(logs[i].rank, e));
      if (it == sent.end() || it->second.first == host_of[i]) continue;
      const double flight = e.t1 + offset[std::size_t(host_of[i])] - it->second.second;
      auto [at, fresh] = least.emplace(std::pair{it->second.first, host_of[i]}, flight);
      if (!fresh) at->second = std::min(at->second, flight);
    }

  // Move the offsets apart where a flight is too short: the receiver's clock forward first, then
  // the sender's back, each within its error. A few passes settle chains of hosts.
  std::vector<double> shift(offset.size(), 0.0);
  auto room_up = [&](int h) {
    return h == fixed ? 0.0 : error[std::size_t(h)] - shift[std::size_t(h)];
  };
  auto room_down = [&](int h) {
    return h == fixed ? 0.0 : error[std::size_t(h)] + shift[std::size_t(h)];
  };
  auto short_by = [&](const std::pair<int, int>& hosts, double flight) {
    return kMinFlightUs -
           (flight + shift[std::size_t(hosts.second)] - shift[std::size_t(hosts.first)]);
  };
  for (std::size_t pass = 0; pass < 4 * offset.size() + 4; ++pass) {
    bool moved = false;
    for (const auto& [hosts, flight] : least) {
      double need = short_by(hosts, flight);
      if (need <= 0) continue;
      const double up = std::min(need, room_up(hosts.second));
      if (up > 0) shift[std::size_t(hosts.second)] += up, need -= up, moved = true;
      const double down = std::min(need, room_down(hosts.first));
      if (down > 0) shift[std::size_t(hosts.first)] -= down, moved = true;
    }
    if (!moved) break;
  }
  for (std::size_t i = 0; i < logs.size(); ++i) {
    const auto h = std::size_t(host_of[i]);
    logs[i].clock_offset_us = offset[h] + shift[h];
    logs[i].clock_error_us = error[h];
  }
  int left = 0;
  for (const auto& [hosts, flight] : least)
    if (short_by(hosts, flight) > 1e-9) ++left;
  return left;
}

}  // namespace distlab
