// pipeline.hpp — a pipeline's schedules: each stage's order of work, and the ideal machine that
// replays the orders (lessons 11 and 14, and the viewer's Schedule panel).
//
// A stage's order is a list of ops on micro-batch m of model chunk c:
//   F  forward                                  1 unit on the ideal machine
//   B  backward: the input's and the weights' gradients at once    2 units
//   I  the input's gradient alone (zero bubble's B)                 1 unit
//   W  the weights' gradient alone, any time after its I            1 unit
// On the ideal machine messages take nothing and an op starts when its stage is free and its
// input is there: a forward the forward of the virtual stage before, a backward (or I) the one of
// the virtual stage after (the last one: its own forward), a W its own I. With P ranks and v
// chunks each, chunk c of rank r is virtual stage c P + r (Megatron's interleaving); v = 1 but
// for the interleaved schedule.
//
// The schedules and what the ideal machine makes of them (every formula is checked against the
// replay for every P <= 8 and M <= 32 by the unit tests):
//   naive        the whole batch (M = 1) forward through every stage, then back      1/P
//   gpipe        all M forwards, then all M backwards (the last forward's first)     M/(M+P-1)
//   1f1b         P - r - 1 forwards on stage r, then a forward and a backward in turn,
//                then the backwards left                                             M/(M+P-1)
//   interleaved  1F1B over v chunks per rank, P micro-batches through chunk 0, then the
//                same P through chunk 1, ...; 2(P - r - 1) + (v - 1) P warm-up
//                forwards; P must divide M                                           vM/(vM+P-1)
//   zb-h1        1F1B with B split into I and W; stage r puts off its first r W's
//                to the cool-down, where they fill the bubble; M >= P                3M/(3M+P-1)
// (the bubble: (P-1)(F+B) of GPipe and 1F1B, (P-1)(F+B)/v interleaved, (P-1)(F+I-W) zero bubble).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlab::pipeline {

enum class Schedule : std::uint8_t { naive, gpipe, one_f_one_b, interleaved, zb_h1 };
const char* to_string(Schedule s);  // "naive", "gpipe", "1f1b", "interleaved", "zb-h1"
std::optional<Schedule> schedule_named(std::string_view name);
inline constexpr const char* kScheduleNames = "naive, gpipe, 1f1b, interleaved or zb-h1";

enum class Pass : std::uint8_t { forward, backward, input, weight };
// "forward", "backward", "backward-input", "backward-weight": the trace's phase op, and the span's
// name with the micro-batch ("backward-input 3"; " chunk c" after it when interleaved).
const char* to_string(Pass p);
std::optional<Pass> pass_named(std::string_view name);  // to_string's inverse
char letter(Pass p);                                    // F, B, I, W

struct Op {
  Pass pass = Pass::forward;
  int micro = 0;
  int chunk = 0;
  bool forward() const { return pass == Pass::forward; }
  bool operator==(const Op&) const = default;
};

// The ideal machine's cost of each pass (units).
inline constexpr int kForwardUnits = 1, kBackwardUnits = 2, kInputUnits = 1, kWeightUnits = 1;
int units(Pass p);

// A pipeline: its schedule, P stages (ranks), M micro-batches, v chunks per rank.
struct Shape {
  Schedule schedule = Schedule::gpipe;
  int stages = 1, micro = 1, chunks = 1;
  int virtual_stages() const { return stages * chunks; }
};

// Why the schedule cannot run this shape, as a sentence for the user; empty when it can.
std::string refusal(const Shape& s);

// Stage r's order of work, and every stage's.
std::vector<Op> order_of(const Shape& s, int r);
std::vector<std::vector<Op>> orders_of(const Shape& s);

// The schedule's claims, apart from any order: each stage's utilisation on the ideal machine
// (the table above), and the most micro-batches (of one chunk each) stage r holds activations for
// at once: GPipe M, 1F1B min(P - r, M), interleaved min(2(P - r - 1) + (v - 1) P + 1, v M),
// zero bubble min(P, M) on every stage (1F1B's peak, on stage 0, everywhere).
double utilisation_formula(const Shape& s);
int in_flight_formula(const Shape& s, int r);
// The formula as text: its symbol "M/(M+P-1)", its fraction "4/7", and both: "M/(M+P-1) = 4/7".
std::string utilisation_symbol(const Shape& s);
std::string utilisation_fraction(const Shape& s);
std::string utilisation_text(const Shape& s);

// The most micro-batches a stage holds activations for at once, following its order: a forward
// takes them, a backward or a W lets them go.
int max_in_flight(const std::vector<Op>& ops);

// ends[r][i]: when stage r's i-th op ends on the ideal machine. An op whose input never comes (an
// order that would deadlock) is left out: its stage's list is then shorter than its order.
std::vector<std::vector<int>> ideal_ends(const std::vector<std::vector<Op>>& orders, int micro,
                                         int chunks = 1);

// The distinct end times of the ideal machine's ops, in order (ranked: lesson 11's step ids).
std::vector<int> ideal_ticks(const std::vector<std::vector<int>>& ends);

// Every stage's order replayed: B/T against the formula, in integers.
struct IdealReplay {
  bool complete = false;  // every op of every order ran
  int step = 0;           // T: the last op's end
  int busy = 0;           // B summed over the stages
  // Each stage's utilisation, B / (P T); 0 for an empty replay.
  double utilisation(int stages) const {
    return step > 0 && stages > 0 ? double(busy) / (double(stages) * double(step)) : 0.0;
  }
  // B / (P T) equals the shape's formula exactly (num/den: the formula's fraction).
  bool matches(const Shape& s) const;
};
IdealReplay replay_ideal(const std::vector<std::vector<Op>>& orders, int micro, int chunks = 1);

}  // namespace distlab::pipeline
