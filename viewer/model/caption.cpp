// caption.cpp — a step's sentence from its messages, and --describe's summary (caption.hpp).
//
//   index_captions    messages per beat, phase-text spans per rank, training steps
//   group / pattern   a beat's messages by (buffer, apply), then who sends to whom
//   payload           which chunks, as a formula where one fits
//   sentence          pattern + payload + apply + bytes, and the collective's name
//   window accesses   a step's loads and stores on symmetric windows (no message), in words
//   buffer roles      what a buffer's messages over the whole trace say its collective is
//   caption_at        the step of the moment, its groups' sentences, the phase texts
//   describe          the caption plus in flight, shards, memory, overlap and the pipeline's
//                     schedule, as text
#include "viewer/model/caption.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "core/base/units.hpp"
#include "viewer/model/overlap.hpp"
#include "viewer/model/real_run.hpp"
#include "viewer/model/schedule.hpp"
#include "viewer/model/shard_replay.hpp"

namespace distlab::viewer {

namespace {

constexpr double kEps = 1e-9;
constexpr std::size_t kMaxPhaseTexts = 6;
constexpr int kMaxListed = 6;  // ranks or messages named one by one before "and k more"

int mod(int a, int n) {
  return n > 0 ? ((a % n) + n) % n : 0;
}

std::string bytes_text(std::int64_t b) {
  return format_bytes(static_cast<double>(b));
}

// ---- who -----------------------------------------------------------------------------------

struct Who {
  std::string text;
  bool plural = false;  // "r1 and r2 send", "every rank sends"
};

// "every rank", "every other rank" (all but `except`), "r2", "r1, r2 and r3", "12 ranks".
Who who_of(const std::set<int>& ranks, int world, int except = -1) {
  const int k = static_cast<int>(ranks.size());
  if (k == world && world > 1) return {"every rank", false};
  if (except >= 0 && k == world - 1 && !ranks.count(except) && k > 1)
    return {"every other rank", false};
  if (k == 1) return {fmt::format("r{}", *ranks.begin()), false};
  if (k > kMaxListed) return {fmt::format("{} ranks", k), true};
  std::string out;
  int i = 0;
  for (int r : ranks) {
    out += i == 0 ? "" : i + 1 == k ? " and " : ", ";
    out += fmt::format("r{}", r);
    ++i;
  }
  return {out, true};
}

// "sends" / "send" by the subject's number.
std::string verb(const char* base, bool plural) {
  std::string v = base;
  return plural ? v : v + "s";
}

// ---- a beat's messages, grouped ------------------------------------------------------------

struct Group {
  std::uint32_t buffer = 0;  // string id, 0 = none
  ApplyKind apply = ApplyKind::none;
  std::vector<const Message*> msgs;
  std::set<int> senders, receivers;
};

std::vector<Group> group_messages(const TraceModel& m, const std::vector<std::uint32_t>& ids) {
  std::vector<Group> groups;
  const int n = m.world_size();
  for (std::uint32_t i : ids) {
    const Message& msg = m.messages[i];
    if (msg.src < 0 || msg.dst < 0 || msg.src >= n || msg.dst >= n) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.buffer == msg.buffer && g.apply == msg.apply;
    });
    if (it == groups.end()) {
      groups.push_back({msg.buffer, msg.apply, {}, {}, {}});
      it = std::prev(groups.end());
    }
    it->msgs.push_back(&msg);
    it->senders.insert(msg.src);
    it->receivers.insert(msg.dst);
  }
  return groups;
}

// ---- who sends to whom ---------------------------------------------------------------------

enum class SendPattern {
  single,
  ring_right,
  ring_left,
  pairs,
  shift,
  ring_in_blocks,
  star_from,
  star_to,
  all_to_all,
  other
};

struct Shape {
  SendPattern pattern = SendPattern::other;
  int mask = 0;            // pairs: partner = r ^ mask
  int offset = 0;          // shift: every rank sends to r + offset (mod N), 1 < offset < N - 1
  int block = 0;           // ring_in_blocks: rings of `block` consecutive ranks (nodes)
  bool both_ways = false;  // pairs: every message's reverse is in the step too
  int root = -1;           // star_from / star_to
};

Shape shape_of(const Group& g, int n) {
  Shape s;
  const auto& ms = g.msgs;
  if (ms.size() == 1) {
    s.pattern = SendPattern::single;
    return s;
  }
  const auto all = [&](auto pred) { return std::all_of(ms.begin(), ms.end(), pred); };
  if (n > 2 && all([n](const Message* x) { return x->dst == (x->src + 1) % n; }))
    return s.pattern = SendPattern::ring_right, s;
  if (n > 2 && all([n](const Message* x) { return x->dst == (x->src + n - 1) % n; }))
    return s.pattern = SendPattern::ring_left, s;
  const int mask = ms.front()->src ^ ms.front()->dst;
  if (mask > 0 && all([mask](const Message* x) { return (x->src ^ x->dst) == mask; })) {
    s.pattern = SendPattern::pairs;
    s.mask = mask;
    std::set<std::pair<int, int>> links;
    for (const Message* x : ms) links.insert({x->src, x->dst});
    s.both_ways = std::all_of(links.begin(), links.end(), [&](const auto& l) {
      return links.count({l.second, l.first}) > 0;
    });
    return s;
  }
  // Every rank to the rank `offset` ahead (Bruck's steps, the pairwise all-to-all's): a ring
  // with a longer stride.
  const int offset = mod(ms.front()->dst - ms.front()->src, n);
  if (n > 3 && offset > 0 && g.senders.size() > 1 &&
      all([&](const Message* x) { return mod(x->dst - x->src, n) == offset; }))
    return s.pattern = SendPattern::shift, s.offset = offset, s;
  // A ring inside each block of G consecutive ranks (the hierarchical all-reduce's nodes): r
  // sends to the next rank of its block, the last to the block's first.
  for (int G = 3; G < n; ++G)
    if (n % G == 0 && g.senders.size() > std::size_t(G) &&
        all([G](const Message* x) { return x->dst == x->src / G * G + (x->src % G + 1) % G; }))
      return s.pattern = SendPattern::ring_in_blocks, s.block = G, s;
  if (g.senders.size() == 1 && !g.receivers.count(*g.senders.begin()))
    return s.pattern = SendPattern::star_from, s.root = *g.senders.begin(), s;
  if (g.receivers.size() == 1 && !g.senders.count(*g.receivers.begin()))
    return s.pattern = SendPattern::star_to, s.root = *g.receivers.begin(), s;
  std::set<std::pair<int, int>> links;
  for (const Message* x : ms) links.insert({x->src, x->dst});
  const std::size_t k = g.senders.size();
  if (g.senders == g.receivers && k > 2 && links.size() == k * (k - 1))
    return s.pattern = SendPattern::all_to_all, s;
  return s;
}

// ---- which chunks --------------------------------------------------------------------------

enum class Chunks { none, whole, one, of_sender, of_receiver, several, mixed };

struct Payload {
  Chunks kind = Chunks::none;
  int chunk = 0;   // one: the chunk; of_sender / of_receiver: the offset o in (r - o) mod C
  int width = 1;   // several: chunks per message
  int chunks = 0;  // the buffer's chunk count C
};

Payload payload_of(const Group& g, int chunks, int n) {
  Payload p;
  p.chunks = chunks;
  if (chunks <= 0) return p;
  const auto& ms = g.msgs;
  const auto whole = [chunks](const Message* x) {
    return x->chunk < 0 || (x->chunk <= 0 && x->chunk_end >= chunks);
  };
  if (std::all_of(ms.begin(), ms.end(), whole)) return p.kind = Chunks::whole, p;
  const int width = ms.front()->chunk_end - ms.front()->chunk;
  const bool same_width = std::all_of(ms.begin(), ms.end(), [width](const Message* x) {
    return x->chunk >= 0 && x->chunk_end - x->chunk == width;
  });
  if (!same_width || width < 1) return p.kind = Chunks::mixed, p;
  if (width > 1) return p.kind = Chunks::several, p.width = width, p;
  const int c = ms.front()->chunk;
  if (std::all_of(ms.begin(), ms.end(), [c](const Message* x) { return x->chunk == c; }) &&
      ms.size() > 1 && g.senders.size() == 1)
    return p.kind = Chunks::one, p.chunk = c, p;
  // A formula of the sender or the receiver: chunk = (r - o) mod C, for one o.
  const auto offset = [&](auto rank_of) {
    const int o = mod(rank_of(ms.front()) - ms.front()->chunk, chunks);
    for (const Message* x : ms)
      if (mod(rank_of(x) - x->chunk, chunks) != o) return -1;
    return o;
  };
  if (chunks == n && ms.size() > 1) {
    if (const int o = offset([](const Message* x) { return x->src; }); o >= 0)
      return p.kind = Chunks::of_sender, p.chunk = o, p;
    if (const int o = offset([](const Message* x) { return x->dst; }); o >= 0)
      return p.kind = Chunks::of_receiver, p.chunk = o, p;
  }
  if (ms.size() == 1 ||
      std::all_of(ms.begin(), ms.end(), [c](const Message* x) { return x->chunk == c; }))
    return p.kind = Chunks::one, p.chunk = c, p;
  return p.kind = Chunks::mixed, p;
}

// "(r - 3) mod 4", "r", with `var` the rank's letter.
std::string formula(const char* var, int o, int chunks) {
  if (o == 0) return var;
  return fmt::format("({} - {}) mod {}", var, o, chunks);
}

// The payload as a noun phrase, from the sender's side.
std::string noun(const Payload& p, const std::string& buffer, bool name_buffer) {
  const std::string of = name_buffer && !buffer.empty() ? " of " + buffer : "";
  switch (p.kind) {
    case Chunks::none:
      return buffer.empty() ? "a message" : buffer;
    case Chunks::whole:
      return name_buffer && !buffer.empty() ? "all of " + buffer : "the whole buffer";
    case Chunks::one:
      return fmt::format("chunk {}{}", p.chunk, of);
    case Chunks::of_sender:
      return p.chunk == 0 ? "its own chunk r" + of
                          : fmt::format("chunk {}{}", formula("r", p.chunk, p.chunks), of);
    case Chunks::of_receiver:
      return fmt::format("chunk {}{} (d the receiver)", formula("d", p.chunk, p.chunks), of);
    case Chunks::several:
      return fmt::format("{} of {} chunks{}", p.width, p.chunks, of);
    case Chunks::mixed:
      return "chunks" + of;
  }
  return "data";
}

// ---- the sentence and the name -------------------------------------------------------------

struct Told {
  std::string name, flow;
};

std::string volume(const Group& g, const Shape& s, int n, bool reduce_style) {
  std::map<std::pair<int, int>, std::int64_t> per_link;
  bool known = true;
  for (const Message* x : g.msgs) {
    known = known && x->bytes >= 0;
    per_link[{x->src, x->dst}] += std::max<std::int64_t>(0, x->bytes);
  }
  std::string out;
  if (known && !per_link.empty()) {
    std::int64_t lo = per_link.begin()->second, hi = lo;
    for (const auto& [link, b] : per_link) lo = std::min(lo, b), hi = std::max(hi, b);
    const std::string amount = lo == hi ? bytes_text(lo) : bytes_text(lo) + " to " + bytes_text(hi);
    out += s.pattern == SendPattern::single ? "; " + amount : "; " + amount + " per link";
  }
  // How many ranks' data the messages carry: what a reduction has summed so far.
  int lo = 1 << 30, hi = 0;
  for (const Message* x : g.msgs) {
    const int c = x->contrib_mask ? std::popcount(x->contrib_mask) : x->contributions;
    lo = std::min(lo, c), hi = std::max(hi, c);
  }
  const char* each = s.pattern == SendPattern::single ? "the message holds" : "each message holds";
  // A group's messages (Comm::split) count ranks of their group, whose size the trace does not
  // say: the count alone.
  if (hi > 0 && g.apply == ApplyKind::reduce && g.msgs.front()->group != 0)
    out += lo == hi ? fmt::format("; {} {} {} data", each, lo, lo == 1 ? "rank's" : "ranks'")
                    : fmt::format("; messages hold {} to {} ranks' data", lo, hi);
  else if (hi > 0 && g.apply == ApplyKind::reduce)
    out += lo == hi ? fmt::format("; {} {} of {} ranks' data", each, lo, n)
                    : fmt::format("; messages hold {} to {} of {} ranks' data", lo, hi, n);
  else if (g.apply == ApplyKind::copy && reduce_style && lo == n && hi == n && n > 1 &&
           g.msgs.front()->group == 0)
    out += fmt::format("; {} the finished sum of all {} ranks", each, n);
  return out;
}

// The collective, when the messages say it.
// No rank both sends and receives: data flows one way, as in a level of a tree.
bool one_way(const Group& g) {
  for (int r : g.senders)
    if (g.receivers.count(r)) return false;
  return true;
}

// "reduce up two trees (half of the data each)": a reduce (`up`) or broadcast (`down`) over `k`
// trees, each with its part of the buffer; over one tree, the plain name.
std::string trees(const char* collective, const char* way, int k) {
  if (k == 1) return collective;
  if (k == 2) return fmt::format("{} {} two trees (half of the data each)", collective, way);
  return fmt::format("{} {} {} trees (1/{} of the data each)", collective, way, k, k);
}

std::string name_of(const Group& g, const Shape& s, const Payload& p,
                    const BufferRole* role = nullptr) {
  const Message& first = *g.msgs.front();
  const bool whole = p.kind == Chunks::whole;
  if (g.apply == ApplyKind::reduce) {
    if (s.pattern == SendPattern::star_to || s.pattern == SendPattern::single) return "reduce";
    if (whole && one_way(g)) return "reduce";  // a level of a reduction tree
    // Chunks that end on a few roots: trees reducing their parts, pipelined chunk by chunk.
    if (!whole && role && role->reduce_roots > 0) return trees("reduce", "up", role->reduce_roots);
    return whole ? "all-reduce" : "reduce-scatter";
  }
  if (g.apply == ApplyKind::copy && role && role->all_to_all) return "all-to-all";
  // Copies of a reduced buffer that start on a few roots: trees broadcasting the sums, a level
  // (or a segment) a step; one message at the top of a binomial tree is a level too.
  if (g.apply == ApplyKind::copy && role && role->broadcast_roots > 0)
    return trees("broadcast", "down", role->broadcast_roots);
  if (g.apply != ApplyKind::copy || s.pattern == SendPattern::single) return "";
  bool same_payload = true, one_mask = true;  // every message carries the same chunks, data
  for (const Message* x : g.msgs) {
    same_payload = same_payload && x->chunk == first.chunk && x->chunk_end == first.chunk_end;
    one_mask = one_mask && x->contrib_mask == first.contrib_mask;
  }
  if (s.pattern == SendPattern::star_from) return same_payload ? "broadcast" : "scatter";
  if (s.pattern == SendPattern::star_to) return "gather";
  if (s.pattern == SendPattern::all_to_all && !whole && p.kind != Chunks::of_sender)
    return "all-to-all";
  if (!whole && p.kind != Chunks::none) return "all-gather";
  if (whole && one_mask) return "broadcast";
  return "";
}

// "r + 2", "r - 1": the rank `offset` ahead of r, written the shorter way round.
std::string ahead(int offset, int n) {
  return offset <= n / 2 ? fmt::format("r + {}", offset) : fmt::format("r - {}", n - offset);
}

Told tell(const TraceModel& m, const Group& g, int chunks, bool name_buffer, bool reduce_style,
          const BufferRole* role) {
  const int n = m.world_size();
  const Shape s = shape_of(g, n);
  const Payload p = payload_of(g, chunks, n);
  const std::string buffer(m.str(g.buffer));
  std::string what = noun(p, buffer, name_buffer);
  // An all-to-all's chunk r is where the block lands (the receiver's block from r): what the
  // sender sends is its block for that receiver.
  if (role && role->all_to_all && p.kind == Chunks::of_sender && p.chunk == 0)
    what = fmt::format("its block for the receiver d (d's block r{})",
                       name_buffer && !buffer.empty() ? " of " + buffer : "");
  const bool reduce = g.apply == ApplyKind::reduce, copy = g.apply == ApplyKind::copy;
  const Who senders = who_of(g.senders, n, s.root);
  const Who receivers = who_of(g.receivers, n, s.root);
  const Message& first = *g.msgs.front();
  Told t;

  // Who sends what to whom, and what the receiver does with it.
  const char* keeps = reduce ? "add" : "store";
  switch (s.pattern) {
    case SendPattern::single:
      t.flow = fmt::format("r{} sends {} to r{}", first.src, what, first.dst);
      if (reduce || copy) t.flow += reduce ? ", which adds it in" : ", which stores it";
      break;
    case SendPattern::ring_right:
    case SendPattern::ring_left: {
      const bool right = s.pattern == SendPattern::ring_right;
      t.flow = fmt::format("{} {} {} {}", senders.text, verb("send", senders.plural), what,
                           right ? "right" : "left");
      if ((reduce || copy) && one_way(g))  // a tree's level: the receivers only receive
        t.flow += reduce ? ", where it is added in" : ", where it is stored";
      else if (reduce || copy)
        t.flow += fmt::format(" and {} the one from {} {}", verb(keeps, senders.plural),
                              senders.plural ? "their" : "its", right ? "left" : "right");
      break;
    }
    case SendPattern::pairs:
      if (s.both_ways) {
        t.flow = fmt::format("{} {} {} with {} partner r ^ {}", senders.text,
                             verb("exchange", senders.plural), what,
                             senders.plural ? "their" : "its", s.mask);
        // Nodes of G ranks, G a divisor of the mask: the partner is the rank at the same place
        // of another node (the hierarchical all-reduce's step between the nodes).
        if (const int G = m.info.ranks_per_node; G > 0 && s.mask % G == 0)
          t.flow += " (the same place in the other node)";
        if (reduce || copy)
          t.flow += fmt::format(" and {} what arrives", verb(keeps, senders.plural));
      } else {
        t.flow = fmt::format("{} {} {} to r ^ {}", senders.text, verb("send", senders.plural), what,
                             s.mask);
        if (reduce || copy) t.flow += reduce ? ", which adds it in" : ", which stores it";
      }
      break;
    case SendPattern::shift:
      t.flow = fmt::format("{} {} {} to {}", senders.text, verb("send", senders.plural), what,
                           ahead(s.offset, n));
      if (reduce || copy)
        t.flow += fmt::format(" and {} the one from {}", verb(keeps, senders.plural),
                              ahead(n - s.offset, n));
      break;
    case SendPattern::ring_in_blocks:
      t.flow = fmt::format("in each {} of {} ranks (r0-r{}, ...), {} {} {} to the next rank of it",
                           m.info.ranks_per_node == s.block ? "node" : "group", s.block,
                           s.block - 1, senders.text, verb("send", senders.plural), what);
      if (reduce || copy)
        t.flow += fmt::format(" and {} the one from the rank before", verb(keeps, senders.plural));
      break;
    case SendPattern::star_from:
      if (p.kind == Chunks::of_receiver && p.chunk == 0)
        t.flow = fmt::format("r{} sends chunk d{} to each rank d of {}", s.root,
                             name_buffer && !buffer.empty() ? " of " + buffer : "", receivers.text);
      else
        t.flow = fmt::format("r{} sends {} to {}", s.root, what, receivers.text);
      if (reduce || copy)
        t.flow +=
            fmt::format(", which {} it{}", verb(keeps, receivers.plural), reduce ? " in" : "");
      break;
    case SendPattern::star_to:
      t.flow =
          fmt::format("{} {} {} to r{}", senders.text, verb("send", senders.plural), what, s.root);
      if (reduce || copy) t.flow += reduce ? ", which adds them up" : ", which stores them";
      break;
    case SendPattern::all_to_all:
      t.flow = fmt::format("{} {} {} to every other rank", senders.text,
                           verb("send", senders.plural), what);
      if (reduce || copy)
        t.flow += fmt::format(" and {} what arrives", verb(keeps, senders.plural));
      break;
    case SendPattern::other: {
      t.flow = fmt::format("{} messages of {}:", g.msgs.size(), what);
      int listed = 0;
      for (const Message* x : g.msgs) {
        if (listed == kMaxListed) {
          t.flow += fmt::format(" and {} more", g.msgs.size() - kMaxListed);
          break;
        }
        t.flow += fmt::format("{} r{} -> r{}", listed ? "," : "", x->src, x->dst);
        ++listed;
      }
      if (reduce || copy) t.flow += reduce ? "; each receiver adds" : "; each receiver stores";
      break;
    }
  }
  t.flow += volume(g, s, n, reduce_style);

  t.name = name_of(g, s, p, role);
  return t;
}

// A linear collective sends one message per step (02's scatter: r0 -> r1, then r0 -> r2, ...):
// the run of neighbouring steps whose one message shares this one's buffer, apply and sender
// (or receiver) names it. "" when the run is this step alone or names nothing.
std::string run_name(const TraceModel& m, const CaptionIndex& index, int beat, const Group& g,
                     int chunks) {
  constexpr int kMaxRun = 4096;
  const int n = m.world_size();
  if (!g.buffer) return "";
  for (const bool by_sender : {true, false}) {
    const std::set<int>& ends = by_sender ? g.senders : g.receivers;
    if (ends.size() != 1) continue;
    const int root = *ends.begin();
    const auto joins = [&](int b) {
      if (b < 1 || b >= static_cast<int>(index.messages_of_beat.size())) return false;
      const auto& ids = index.messages_of_beat[b];
      return !ids.empty() && std::all_of(ids.begin(), ids.end(), [&](std::uint32_t id) {
        const Message& x = m.messages[id];
        const int near = by_sender ? x.src : x.dst, far = by_sender ? x.dst : x.src;
        return x.buffer == g.buffer && x.apply == g.apply && near == root && far != root &&
               far >= 0 && far < n;
      });
    };
    Group run = g;
    const auto add = [&](int b) {
      for (std::uint32_t id : index.messages_of_beat[b]) {
        const Message& x = m.messages[id];
        run.msgs.push_back(&x);
        run.senders.insert(x.src);
        run.receivers.insert(x.dst);
      }
    };
    int lo = beat, hi = beat;
    while (hi - lo < kMaxRun && joins(lo - 1)) add(--lo);
    while (hi - lo < kMaxRun && joins(hi + 1)) add(++hi);
    if (lo == hi) continue;
    std::string name = name_of(run, shape_of(run, n), payload_of(run, chunks, n));
    if (!name.empty()) return name;
  }
  return "";
}

const BufferRole* role_of(const CaptionIndex& index, std::uint32_t buffer) {
  const auto it =
      std::lower_bound(index.roles.begin(), index.roles.end(), buffer,
                       [](const BufferRole& r, std::uint32_t b) { return r.buffer < b; });
  return it != index.roles.end() && it->buffer == buffer ? &*it : nullptr;
}

// Bytes per rank whose data a beat's buffer-less copies carry, when every message of the beat
// carries the same; 0 otherwise.
double bytes_per_source(const TraceModel& m, const CaptionIndex& index, int beat) {
  if (beat < 1 || beat >= static_cast<int>(index.messages_of_beat.size())) return 0;
  double per = 0;
  for (std::uint32_t id : index.messages_of_beat[beat]) {
    const Message& x = m.messages[id];
    const int c = x.contrib_mask ? std::popcount(x.contrib_mask) : x.contributions;
    if (x.buffer || x.apply != ApplyKind::copy || c < 1 || x.bytes < 0) return 0;
    const double here = double(x.bytes) / c;
    if (per > 0 && std::abs(here - per) > kEps) return 0;
    per = here;
  }
  return per;
}

// Bruck's all-to-all names no chunks (its blocks come from all over the buffer) but says whose
// blocks each message carries: from a step to the next the messages carry blocks of twice as
// many ranks in the same bytes (about N/2 blocks every step, from 2^k ranks), where Bruck's
// all-gather's bytes grow with them (each rank's one block). A neighbouring step that does not
// keep bytes per rank: an all-to-all.
bool bruck_all_to_all(const TraceModel& m, const CaptionIndex& index, int beat) {
  const double here = bytes_per_source(m, index, beat);
  if (here <= 0) return false;
  for (const int b : {beat - 1, beat + 1}) {
    const double there = bytes_per_source(m, index, b);
    if (there > 0 && std::abs(there - here) > kEps) return true;
  }
  return false;
}

// ---- window accesses -----------------------------------------------------------------------

// One kind of a beat's window accesses (loads, or stores) in words. Nothing is sent: each rank
// reads or writes a window itself.
//   one access              "r1 loads 4 KiB from r0's window"
//   each its own window     "every rank stores 4 KiB into its own window"
//   one window, the others  "every other rank loads 4 KiB from r0's window"
//   every other rank's      "every rank loads 1 KiB from every other rank's window"
//   the rank k ahead        "every rank stores 1 KiB into the window of r + 1"
//   else the list           "r1 loads 4 KiB from r0's window, r2 loads 8 KiB from r3's window"
// Sizes: each access's when all are equal, else the total after the sentence.
std::string tell_accesses(const TraceModel& m, const std::vector<const WindowAccess*>& ws,
                          bool store) {
  const int n = m.world_size();
  const char* base = store ? "store" : "load";
  const char* into = store ? "into" : "from";
  std::set<int> ranks, owners;
  std::set<std::pair<int, int>> pairs;
  std::int64_t total = 0;
  bool same = true, known = true;
  for (const WindowAccess* w : ws) {
    ranks.insert(w->rank);
    owners.insert(w->owner);
    pairs.insert({w->rank, w->owner});
    same = same && w->bytes == ws.front()->bytes;
    known = known && w->bytes >= 0;
    total += std::max<std::int64_t>(w->bytes, 0);
  }
  const std::string size = known && same ? bytes_text(ws.front()->bytes) + " " : "";
  const std::string all = known && !same ? fmt::format(", {} in all", bytes_text(total)) : "";
  const auto all_of = [&](auto pred) { return std::all_of(ws.begin(), ws.end(), pred); };
  const auto sentence = [&](const Who& who, const std::string& window) {
    return fmt::format("{} {} {}{} {}{}", who.text, verb(base, who.plural), size, into, window,
                       all);
  };
  if (ws.size() == 1) {
    const WindowAccess& w = *ws.front();
    return sentence(who_of(ranks, n),
                    w.owner == w.rank ? "its own window" : fmt::format("r{}'s window", w.owner));
  }
  if (all_of([](const WindowAccess* w) { return w->owner == w->rank; })) {
    const Who who = who_of(ranks, n);
    return sentence(who, who.plural ? "their own windows" : "its own window");
  }
  if (owners.size() == 1 && !ranks.count(*owners.begin()))
    return sentence(who_of(ranks, n, *owners.begin()),
                    fmt::format("r{}'s window", *owners.begin()));
  const std::size_t k = ranks.size();
  if (ranks == owners && k > 2 && pairs.size() == k * (k - 1)) {
    const Who who = who_of(ranks, n);
    return sentence(
        who, static_cast<int>(k) == n ? "every other rank's window" : "each other's windows");
  }
  const int offset = mod(ws.front()->owner - ws.front()->rank, n);
  if (n > 2 && offset > 0 && k > 1 &&
      all_of([&](const WindowAccess* w) { return mod(w->owner - w->rank, n) == offset; }))
    return sentence(who_of(ranks, n), "the window of " + ahead(offset, n));
  std::string out;
  int listed = 0;
  for (const auto& [rank, owner] : pairs) {
    if (listed == kMaxListed) {
      out += fmt::format(" and {} more", pairs.size() - kMaxListed);
      break;
    }
    out += fmt::format("{}r{} {}s {} {}", listed++ ? ", " : "", rank, base, into,
                       rank == owner ? "its own window" : fmt::format("r{}'s window", owner));
  }
  return out + (size.empty() ? "" : fmt::format(", {} each", bytes_text(ws.front()->bytes))) + all;
}

// A beat's window accesses: its loads, then its stores.
std::string tell_window_beat(const TraceModel& m, const std::vector<std::uint32_t>& ids) {
  std::vector<const WindowAccess*> loads, stores;
  const int n = m.world_size();
  for (std::uint32_t i : ids) {
    const WindowAccess& w = m.accesses[i];
    if (w.rank < 0 || w.owner < 0 || w.rank >= n || w.owner >= n) continue;
    (w.store ? stores : loads).push_back(&w);
  }
  std::string out;
  if (!loads.empty()) out = tell_accesses(m, loads, false);
  if (!stores.empty()) out += (out.empty() ? "" : "; ") + tell_accesses(m, stores, true);
  return out;
}

// The flow and name of one beat's messages, and of its window accesses after them.
Told tell_beat(const TraceModel& m, const CaptionIndex& index, int beat) {
  Told out;
  if (beat < 1 || beat >= static_cast<int>(index.messages_of_beat.size())) return out;
  const auto groups = group_messages(m, index.messages_of_beat[beat]);
  const std::string windows =
      static_cast<std::size_t>(beat) < index.accesses_of_beat.size()
          ? tell_window_beat(m, index.accesses_of_beat[static_cast<std::size_t>(beat)])
          : std::string();
  if (groups.empty()) {
    // Window accesses alone move no message: the ranks load and store themselves.
    out.flow = windows.empty() ? "no messages in this step" : "no messages; " + windows;
    return out;
  }
  std::set<std::uint32_t> reduced;  // buffers some message reduces into, anywhere in the trace
  for (const Group& g : groups)
    if (std::binary_search(index.reduced_buffers.begin(), index.reduced_buffers.end(), g.buffer))
      reduced.insert(g.buffer);
  const bool name_buffer = m.info.buffers.size() > 1;
  for (const Group& g : groups) {
    int chunks = 0;
    for (const BufferInfo& b : m.info.buffers)
      if (g.buffer && b.name == m.str(g.buffer)) chunks = std::max(1, b.chunks);
    Told t = tell(m, g, chunks, name_buffer, reduced.count(g.buffer) > 0, role_of(index, g.buffer));
    if (t.name.empty() && !g.buffer && g.apply == ApplyKind::copy &&
        bruck_all_to_all(m, index, beat)) {
      // Step k moves the blocks whose distance to their destination has bit k set, 2^k ranks.
      const Message& x = *g.msgs.front();
      const int hop = mod(x.dst - x.src, std::max(m.world_size(), 1));
      const std::string blocks = fmt::format(
          "its blocks that hop {} rank{} now (bit {} of their distance set)", hop,
          hop == 1 ? "" : "s", std::countr_zero(static_cast<unsigned>(std::max(hop, 1))));
      t = tell(m, g, chunks, name_buffer, false, nullptr);
      const std::size_t at = t.flow.find("a message");
      if (at != std::string::npos) t.flow.replace(at, 9, blocks);
      t.name = "all-to-all (Bruck)";
    }
    if (groups.size() == 1 && g.msgs.size() == 1)
      if (std::string name = run_name(m, index, beat, g, chunks); !name.empty()) t.name = name;
    if (!t.name.empty() && out.name.find(t.name) == std::string::npos)
      out.name += (out.name.empty() ? "" : " + ") + t.name;
    out.flow += (out.flow.empty() ? "" : "; also ") + t.flow;
  }
  if (!windows.empty()) out.flow += "; and through windows, " + windows;
  return out;
}

// Spans with a phase text that cover t, on any rank.
void texts_covering(const TraceModel& m, const CaptionIndex& index, double t,
                    std::vector<std::uint32_t>& out) {
  for (std::uint32_t i : index.text_spans) {
    const Span& s = m.spans[i];
    if (s.start > t + kEps) break;
    if (t <= s.end() + kEps) out.push_back(i);
  }
}

std::vector<std::string> phase_texts(const TraceModel& m, const CaptionIndex& index,
                                     const Moment& at, int beat) {
  std::vector<std::uint32_t> spans;
  if (at.clock == Clock::steps && !index.texts_of_beat.empty()) {
    // The step's own phases; before the first step, the first step's (the caption's "next").
    const auto b = static_cast<std::size_t>(std::max(beat, 1));
    if (b < index.texts_of_beat.size()) spans = index.texts_of_beat[b];
  } else {
    texts_covering(m, index, at.time_us, spans);
  }
  std::sort(spans.begin(), spans.end(), [&](std::uint32_t a, std::uint32_t b) {
    return m.spans[a].start != m.spans[b].start ? m.spans[a].start < m.spans[b].start : a < b;
  });
  std::vector<std::string> out;
  for (std::uint32_t i : spans) {
    const std::string text(m.str(m.span_args[m.spans[i].args].text));
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
    if (out.size() == kMaxPhaseTexts) break;
  }
  return out;
}

// Which beats each phase text belongs to. A phase around messages of its rank (sent at their
// send, received at their arrival) belongs to their steps ("1 pull"); a phase with no message
// of its own in it belongs to the step of the rank's last message before it ("3 compute
// gradients" after the pull arrived, "5 update" after the pushes), else of its first after.
std::vector<std::vector<std::uint32_t>> beats_of_texts(const TraceModel& m,
                                                       const CaptionIndex& index) {
  std::vector<std::vector<std::uint32_t>> of_beat(index.messages_of_beat.size());
  struct Event {
    double t;
    int beat;
  };
  std::vector<std::vector<Event>> events(m.ranks.size());
  for (std::size_t b = 1; b < index.messages_of_beat.size(); ++b)
    for (std::uint32_t id : index.messages_of_beat[b]) {
      const Message& msg = m.messages[id];
      if (msg.src >= 0 && msg.src < static_cast<int>(events.size()))
        events[msg.src].push_back({msg.send_time, static_cast<int>(b)});
      if (msg.dst >= 0 && msg.dst < static_cast<int>(events.size()))
        events[msg.dst].push_back({msg.arrival, static_cast<int>(b)});
    }
  for (std::size_t b = 1; b < index.accesses_of_beat.size(); ++b)  // the rank that loads or stores
    for (std::uint32_t id : index.accesses_of_beat[b]) {
      const WindowAccess& w = m.accesses[id];
      if (w.rank >= 0 && w.rank < static_cast<int>(events.size()))
        events[w.rank].push_back({w.start, static_cast<int>(b)});
    }
  for (auto& list : events)
    std::sort(list.begin(), list.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
  for (std::uint32_t i : index.text_spans) {
    const Span& s = m.spans[i];
    const int rank = m.lanes[s.lane].rank;
    if (rank < 0 || rank >= static_cast<int>(events.size()) || events[rank].empty()) continue;
    const auto& list = events[rank];
    auto it = std::lower_bound(list.begin(), list.end(), s.start - kEps,
                               [](const Event& e, double t) { return e.t < t; });
    std::set<int> beats;
    for (auto e = it; e != list.end() && e->t <= s.end() + kEps; ++e) beats.insert(e->beat);
    if (beats.empty()) beats.insert(it != list.begin() ? std::prev(it)->beat : it->beat);
    for (int b : beats) of_beat[static_cast<std::size_t>(b)].push_back(i);
  }
  return of_beat;
}

// ---- what a buffer's collective is, over the whole trace (BufferRole) ------------------------

int contributions_of(const Message& x) {
  return x.contrib_mask ? std::popcount(x.contrib_mask) : x.contributions;
}

std::vector<BufferRole> buffer_roles(const TraceModel& m) {
  struct Seen {
    std::map<int, std::pair<int, int>> top;       // reduce: chunk -> (most ranks summed, holder)
    std::map<int, std::pair<double, int>> first;  // copy: chunk -> (earliest send, its sender)
    std::set<int> reducers, copiers, copied_to;
    std::map<int, std::set<int>> own_to;  // copies of the sender's own block: sender -> receivers
    bool only_own = true;                 // every copy carries its sender's own block
  };
  std::map<std::uint32_t, Seen> seen;
  for (const Message& x : m.messages) {
    // A group's messages (Comm::split) number chunks within their group, and every group of a
    // name shares it: they say nothing of the world's roots.
    if (!x.buffer || x.group || x.chunk < 0 || x.src < 0 || x.dst < 0) continue;
    Seen& b = seen[x.buffer];
    if (x.apply == ApplyKind::reduce) {
      b.reducers.insert(x.src);
      for (int c = x.chunk; c < x.chunk_end; ++c) {
        auto [it, fresh] = b.top.try_emplace(c, contributions_of(x), x.dst);
        if (!fresh && contributions_of(x) >= it->second.first)
          it->second = {contributions_of(x), x.dst};
      }
    } else if (x.apply == ApplyKind::copy) {
      b.copiers.insert(x.src);
      b.copied_to.insert(x.dst);
      const bool own = x.chunk == x.src && x.chunk_end == x.src + 1;
      b.only_own = b.only_own && own;
      if (own) b.own_to[x.src].insert(x.dst);
      for (int c = x.chunk; c < x.chunk_end; ++c) {
        auto [it, fresh] = b.first.try_emplace(c, x.send_time, x.src);
        if (!fresh && x.send_time < it->second.first) it->second = {x.send_time, x.src};
      }
    }
  }
  std::vector<BufferRole> out;
  for (const auto& [buffer, b] : seen) {
    BufferRole role;
    role.buffer = buffer;
    std::set<int> holders, origins;
    for (const auto& [c, top] : b.top) holders.insert(top.second);
    for (const auto& [c, first] : b.first) origins.insert(first.second);
    if (!holders.empty() && holders.size() < b.reducers.size())
      role.reduce_roots = static_cast<int>(holders.size());
    if (!b.top.empty() && !origins.empty() && origins.size() < b.copiers.size())
      role.broadcast_roots = static_cast<int>(origins.size());
    // Every rank both sends and receives, each its own block to several ranks (a server that
    // sends its shard of the parameters to the workers is a broadcast: they send none back).
    role.all_to_all = b.top.empty() && b.only_own && b.copiers.size() > 2 &&
                      b.copiers == b.copied_to &&
                      std::all_of(b.own_to.begin(), b.own_to.end(),
                                  [](const auto& e) { return e.second.size() > 1; });
    out.push_back(role);
  }
  return out;  // by buffer id: std::map's order
}

}  // namespace

// ---- the caption ---------------------------------------------------------------------------

std::string Caption::body() const {
  std::string out;
  if (train_steps > 0 && train_step > 0)
    out += fmt::format("training step {} of {}; ", train_step, train_steps);
  if (!collective.empty()) out += collective + ": ";
  return out + flow;
}

std::string Caption::line() const {
  if (steps == 0) return body();
  std::string head = fmt::format("step {} of {}", beat, steps);
  if (train_steps > 0 && train_step > 0)
    head += fmt::format(" (training step {} of {})", train_step, train_steps);
  return head + (collective.empty() ? ": " : ", " + collective + ": ") + flow;
}

CaptionIndex index_captions(const TraceModel& m) {
  CaptionIndex index;
  if (m.info.source == "pytorch") {
    const RealRun run = analyze_real_run(m);
    for (std::size_t k = 0; k < run.calls.size(); ++k)
      index.call_flows.push_back(call_caption(m, run, static_cast<int>(k)));
  }
  // The beat of step id `step` (beat k + 1 is step_ids[k]), or 0 for none.
  const auto beat_of = [&](int step) -> std::size_t {
    const auto it = std::lower_bound(m.step_ids.begin(), m.step_ids.end(), step);
    if (step < 0 || it == m.step_ids.end() || *it != step) return 0;
    return static_cast<std::size_t>(it - m.step_ids.begin()) + 1;
  };
  index.messages_of_beat.resize(m.step_ids.size() + 1);
  for (std::size_t i = 0; i < m.messages.size(); ++i) {
    const Message& msg = m.messages[i];
    if (msg.apply == ApplyKind::reduce && msg.buffer) index.reduced_buffers.push_back(msg.buffer);
    if (const std::size_t b = beat_of(msg.step))
      index.messages_of_beat[b].push_back(static_cast<std::uint32_t>(i));
  }
  index.accesses_of_beat.resize(m.step_ids.size() + 1);
  for (std::size_t i = 0; i < m.accesses.size(); ++i)
    if (const std::size_t b = beat_of(m.accesses[i].step))
      index.accesses_of_beat[b].push_back(static_cast<std::uint32_t>(i));
  std::sort(index.reduced_buffers.begin(), index.reduced_buffers.end());
  index.reduced_buffers.erase(
      std::unique(index.reduced_buffers.begin(), index.reduced_buffers.end()),
      index.reduced_buffers.end());
  for (std::size_t i = 0; i < m.spans.size(); ++i) {
    const SpanArgs* a = m.args(m.spans[i]);
    if (m.spans[i].kind == SpanKind::compute && a && a->text)
      index.text_spans.push_back(static_cast<std::uint32_t>(i));
  }
  std::sort(
      index.text_spans.begin(), index.text_spans.end(), [&](std::uint32_t a, std::uint32_t b) {
        return m.spans[a].start != m.spans[b].start ? m.spans[a].start < m.spans[b].start : a < b;
      });
  index.texts_of_beat = beats_of_texts(m, index);
  index.training = train_steps(m);
  index.roles = buffer_roles(m);
  return index;
}

int caption_beat(const TraceModel& m, const Moment& at) {
  const int steps = static_cast<int>(m.step_ids.size());
  if (steps == 0) return 0;
  return std::clamp(static_cast<int>(std::ceil(at.beat - kEps)), 0, steps);
}

Caption caption_at(const TraceModel& m, const CaptionIndex& index, const Moment& at) {
  Caption c;
  c.steps = static_cast<int>(m.step_ids.size());
  c.beat = caption_beat(m, at);
  c.step_id = c.beat >= 1 ? m.step_ids[c.beat - 1] : -1;
  if (!index.call_flows.empty()) {  // a real run: a step is a collective
    const std::size_t k = static_cast<std::size_t>(std::max(0, c.beat - 1));
    if (k < m.collectives.size()) c.collective = std::string(m.str(m.collectives[k].name));
    if (k < index.call_flows.size())
      c.flow = (c.beat == 0 ? "before the first collective; next, " : "") + index.call_flows[k];
  } else if (c.steps == 0) {
    c.flow = "this trace has no algorithm steps";
  } else if (c.beat == 0) {
    const Told next = tell_beat(m, index, 1);
    c.flow =
        "nothing has moved yet; next, " + (next.name.empty() ? "" : next.name + ": ") + next.flow;
  } else {
    const Told t = tell_beat(m, index, c.beat);
    c.collective = t.name;
    c.flow = t.flow;
    // Messages in groups (Comm::split: lesson 14's dp, pp, tp) say which: the pattern above is
    // in ranks of the world, repeated in each group.
    std::set<std::string_view> groups;
    for (const std::uint32_t i : index.messages_of_beat[static_cast<std::size_t>(c.beat)])
      groups.insert(m.str(m.messages[i].group));
    if (groups.size() == 1 && !groups.begin()->empty())
      c.flow = fmt::format("in each {} group, {}", *groups.begin(), c.flow);
    else if (groups.size() > 1)
      c.flow += fmt::format("; groups {}", fmt::join(groups, ", "));
  }
  const int k = at.clock == Clock::steps ? (c.step_id >= 0 ? index.training.at_step(c.step_id) : -1)
                                         : index.training.at_time(at.time_us);
  if (k >= 0) c.train_step = k + 1, c.train_steps = index.training.count();
  c.phase_texts = phase_texts(m, index, at, c.beat);
  return c;
}

Caption caption_at(const TraceModel& m, const Moment& at) {
  return caption_at(m, index_captions(m), at);
}

// ---- --describe ----------------------------------------------------------------------------

namespace {

// "data chunk 2", "data chunks 0..1", "data", "" for a message without a buffer.
std::string chunk_text(const TraceModel& m, const Message& msg) {
  const std::string b(m.str(msg.buffer));
  if (b.empty()) return "";
  if (msg.chunk < 0) return b + " (whole)";
  if (msg.chunk_end > msg.chunk + 1)
    return fmt::format("{} chunks {}..{}", b, msg.chunk, msg.chunk_end - 1);
  return fmt::format("{} chunk {}", b, msg.chunk);
}

const char* apply_text(ApplyKind a) {
  return a == ApplyKind::reduce ? "reduce" : a == ApplyKind::copy ? "copy" : "";
}

}  // namespace

std::string describe(const TraceModel& m, const Moment& at) {
  const int n = m.world_size();
  const CaptionIndex index = index_captions(m);
  const Caption c = caption_at(m, index, at);
  std::string out;
  const std::string name = m.info.lesson.empty() ? std::string("trace") : m.info.lesson;
  out += fmt::format("{}: {} rank{}, {} step{}; at step {:.2f} of {} ({} clock), t = {}\n", name, n,
                     n == 1 ? "" : "s", c.steps, c.steps == 1 ? "" : "s", at.beat, last_beat(m),
                     to_string(at.clock),
                     format_seconds(std::max(0.0, at.time_us - m.t_begin) * 1e-6));
  out += "caption: " + c.line() + "\n";
  for (const std::string& t : c.phase_texts) out += "phase: " + t + "\n";

  // In flight.
  const std::vector<InFlight> flying = in_flight(m, at);
  out += fmt::format("in flight: {}\n", flying.empty() ? "none" : std::to_string(flying.size()));
  for (std::size_t i = 0; i < flying.size(); ++i) {
    if (i == 16) {
      out += fmt::format("  ... and {} more\n", flying.size() - 16);
      break;
    }
    const Message& msg = m.messages[flying[i].message];
    out += fmt::format("  r{} -> r{}  {}", msg.src, msg.dst,
                       msg.bytes >= 0 ? bytes_text(msg.bytes) : std::string("? B"));
    const std::string chunk = chunk_text(m, msg);
    if (!chunk.empty()) out += "  " + chunk;
    if (msg.apply != ApplyKind::none) out += std::string("  ") + apply_text(msg.apply);
    out += fmt::format("  {:.0f}% of the way\n", flying[i].progress * 100);
  }

  // Window accesses under way (a trace with any): no message, a rank's own load or store.
  if (!m.accesses.empty()) {
    const std::vector<InProgress> under_way = accesses_in_progress(m, at);
    out += fmt::format("window accesses: {}\n",
                       under_way.empty() ? "none" : std::to_string(under_way.size()));
    for (std::size_t i = 0; i < under_way.size(); ++i) {
      if (i == 16) {
        out += fmt::format("  ... and {} more\n", under_way.size() - 16);
        break;
      }
      const WindowAccess& w = m.accesses[under_way[i].access];
      out += fmt::format(
          "  r{} {} {}  {}  {:.0f}% done\n", w.rank, w.store ? "stores into" : "loads from",
          w.owner == w.rank ? "its own window" : fmt::format("r{}'s window", w.owner),
          w.bytes >= 0 ? bytes_text(w.bytes) : std::string("? B"), under_way[i].progress * 100);
    }
  }

  // Shards: a row per rank, a cell per chunk.
  if (m.info.buffers.empty() || n == 0) {
    out += "shards: this trace declares no buffers\n";
  } else {
    const ShardState st = shards_at(m, at);
    out += "shards";
    if (st.train_step >= 0)
      out += fmt::format(" (training step {} of {}: its exchange only)", st.train_step + 1,
                         index.training.count());
    out += ": per rank, each chunk's ranks of data (- = not held)\n";
    for (const BufferState& b : st.buffers) {
      bool reduced = false;  // some message reduces into it
      for (std::uint32_t id : index.reduced_buffers) reduced = reduced || m.str(id) == b.name;
      out +=
          fmt::format("  {}, {} chunk{}, {}\n", b.name, b.chunks, b.chunks == 1 ? "" : "s",
                      reduced ? "reduced into (a count of ranks summed)" : "copied (whose data)");
      if (b.chunks == 0) continue;
      for (int r = 0; r < n; ++r) {
        if (r == 16) {
          out += fmt::format("    ... and {} more ranks\n", n - 16);
          break;
        }
        int held = 0, complete = 0;
        std::string cells;
        for (int k = 0; k < b.chunks; ++k) {
          const ChunkState& cell = b.at(r, k);
          held += cell.held;
          complete += cell.held && cell.count >= n;
          if (b.chunks > 32) continue;
          std::string token = "-";
          if (cell.held)
            token = !reduced && std::popcount(cell.mask) == 1
                        ? fmt::format("r{}", std::countr_zero(cell.mask))
                        : std::to_string(cell.count);
          cells += " " + token;
        }
        out += fmt::format("    r{}{}  ({} of {} held", r, cells, held, b.chunks);
        if (reduced) out += fmt::format(", {} complete", complete);
        out += ")\n";
      }
    }
  }

  // Memory.
  bool ledger = false;
  for (const auto& series : m.memory) ledger = ledger || !series.empty();
  if (!ledger) {
    out += "memory: this trace has no memory ledger\n";
  } else {
    out += "memory: the ledger per rank at this moment\n";
    const std::vector<MemorySample> now = memory_at(m, at);
    for (int r = 0; r < n && r < static_cast<int>(now.size()); ++r) {
      if (r == 16) {
        out += fmt::format("  ... and {} more ranks\n", n - 16);
        break;
      }
      std::int64_t total = 0;
      std::string parts;
      for (int k = 0; k < kMemoryCategories; ++k) {
        total += now[r].bytes[k];
        if (now[r].bytes[k] > 0)
          parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", memory_category_name(k),
                               bytes_text(now[r].bytes[k]));
      }
      out += fmt::format("  r{}  {}{}\n", r, bytes_text(total),
                         parts.empty() ? "" : " (" + parts + ")");
    }
  }
  out += describe_overlap(m, at.time_us) + describe_schedule(build_pipeline_schedule(m), at);
  if (m.info.source == "pytorch") {
    const RealRun run = analyze_real_run(m);
    out += describe_call(m, run, c.beat - 1) + describe_real_run(m, run);
  }
  return out;
}

}  // namespace distlab::viewer
