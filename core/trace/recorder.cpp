// Binary form of a RankLog, so MPI ranks can ship their logs to rank 0 at the end.
#include "core/trace/recorder.hpp"

#include <cstring>
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

}  // namespace distlab
