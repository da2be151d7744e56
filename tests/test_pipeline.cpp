// Tests for core/base/pipeline.hpp: every schedule's orders, replayed on the ideal machine, give
// the schedule's formula exactly, and hold the activations its formula says.
#include "catch.hpp"

#include <string>
#include <vector>

#include "core/base/pipeline.hpp"

using namespace distlab::pipeline;

namespace {

std::string letters(const std::vector<Op>& ops) {
  std::string out;
  for (const Op& op : ops) {
    if (!out.empty()) out += ' ';
    out += letter(op.pass);
    out += std::to_string(op.micro);
  }
  return out;
}

// Every shape the header's table claims its formula for, up to P = 8 and M = 32.
std::vector<Shape> shapes() {
  std::vector<Shape> all;
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 32; ++M) {
      all.push_back({Schedule::gpipe, P, M, 1});
      all.push_back({Schedule::one_f_one_b, P, M, 1});
      if (M >= P) all.push_back({Schedule::zb_h1, P, M, 1});
      for (int v = 2; v <= 4; ++v)
        if (M % P == 0) all.push_back({Schedule::interleaved, P, M, v});
    }
  for (int P = 1; P <= 8; ++P) all.push_back({Schedule::naive, P, 1, 1});
  return all;
}

}  // namespace

TEST_CASE("pipeline: every schedule's orders on the ideal machine give its formula exactly",
          "[pipeline]") {
  int checked = 0;
  for (const Shape& s : shapes()) {
    INFO(to_string(s.schedule) << " P " << s.stages << " M " << s.micro << " v " << s.chunks);
    REQUIRE(refusal(s).empty());
    const auto orders = orders_of(s);
    const IdealReplay r = replay_ideal(orders, s.micro, s.chunks);
    CHECK(r.complete);
    CHECK(r.matches(s));
    CHECK(r.utilisation(s.stages) == Approx(utilisation_formula(s)));
    for (int k = 0; k < s.stages; ++k) {
      CHECK(max_in_flight(orders[std::size_t(k)]) == in_flight_formula(s, k));
      // Every micro-batch of every chunk goes forward once and back once (B, or I and W).
      int f = 0, b = 0, i = 0, w = 0;
      for (const Op& op : orders[std::size_t(k)])
        (op.pass == Pass::forward    ? f
         : op.pass == Pass::backward ? b
         : op.pass == Pass::input    ? i
                                     : w)++;
      CHECK(f == s.micro * s.chunks);
      CHECK(b + i == s.micro * s.chunks);
      CHECK(i == w);
    }
    ++checked;
  }
  CHECK(checked > 1000);
}

TEST_CASE("pipeline: the formulas' figures at P = 4, M = 8", "[pipeline]") {
  CHECK(utilisation_formula({Schedule::one_f_one_b, 4, 8, 1}) == Approx(8.0 / 11));
  CHECK(utilisation_formula({Schedule::interleaved, 4, 8, 2}) == Approx(16.0 / 19));
  CHECK(utilisation_formula({Schedule::zb_h1, 4, 8, 1}) == Approx(24.0 / 27));
  CHECK(utilisation_text({Schedule::zb_h1, 4, 8, 1}) == "3M/(3M+P-1) = 24/27");
  CHECK(replay_ideal(orders_of({Schedule::interleaved, 2, 2, 2}), 2, 2).step == 15);
}

TEST_CASE("pipeline: zero bubble puts off stage r's first r W's to the cool-down", "[pipeline]") {
  const Shape s{Schedule::zb_h1, 4, 8, 1};
  CHECK(letters(order_of(s, 0)) ==
        "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7");
  CHECK(letters(order_of(s, 3)) ==
        "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7");
  // The same order with every W right after its I (nothing put off) leaves part of the bubble:
  // the replay tells it from zero bubble's formula.
  std::vector<std::vector<Op>> eager;
  for (int r = 0; r < 4; ++r) {
    std::vector<Op> ops;
    for (const Op& op : order_of(s, r)) {
      if (op.pass == Pass::weight) continue;
      ops.push_back(op);
      if (op.pass == Pass::input) ops.push_back({Pass::weight, op.micro});
    }
    eager.push_back(ops);
  }
  const IdealReplay r = replay_ideal(eager, 8);
  CHECK(r.complete);
  CHECK_FALSE(r.matches(s));
  CHECK(r.step > replay_ideal(orders_of(s), 8).step);
}

TEST_CASE("pipeline: interleaving sends P micro-batches through a chunk, then the next",
          "[pipeline]") {
  const std::vector<Op> ops = order_of({Schedule::interleaved, 2, 4, 2}, 1);
  // Stage 1 of 2: warm-up 2(P - r - 1) + (v - 1)P = 2 forwards, then F and B in turn.
  REQUIRE(ops.size() == 16);
  CHECK(ops[0] == Op{Pass::forward, 0, 0});
  CHECK(ops[1] == Op{Pass::forward, 1, 0});
  CHECK(ops[2] == Op{Pass::forward, 0, 1});
  CHECK(ops[3] == Op{Pass::backward, 0, 1});  // the last chunk's backward first
  CHECK(ops[4] == Op{Pass::forward, 1, 1});
  CHECK(ops[5] == Op{Pass::backward, 1, 1});
  CHECK(ops[6] == Op{Pass::forward, 2, 0});
  CHECK(ops[7] == Op{Pass::backward, 0, 0});
  // An order that skips a chunk's forward never completes.
  std::vector<std::vector<Op>> broken = orders_of({Schedule::interleaved, 2, 4, 2});
  broken[0].erase(broken[0].begin() + 2);
  CHECK_FALSE(replay_ideal(broken, 4, 2).complete);
}

TEST_CASE("pipeline: shapes a schedule cannot run are refused with a reason", "[pipeline]") {
  CHECK(refusal({Schedule::interleaved, 4, 6, 2}).find("multiple of the 4 stages") !=
        std::string::npos);
  CHECK(refusal({Schedule::interleaved, 4, 8, 1}).find("at least 2 chunks") != std::string::npos);
  CHECK(refusal({Schedule::zb_h1, 4, 3, 1}).find("M >= P") != std::string::npos);
  CHECK(refusal({Schedule::one_f_one_b, 4, 8, 2}).find("--virtual-stages") != std::string::npos);
  CHECK(refusal({Schedule::naive, 4, 2, 1}).find("whole batch") != std::string::npos);
  CHECK(refusal({Schedule::gpipe, 0, 2, 1}).find("at least one stage") != std::string::npos);
  CHECK(schedule_named("zb-h1") == Schedule::zb_h1);
  CHECK(schedule_named("interleaved") == Schedule::interleaved);
  CHECK_FALSE(schedule_named("zb-h2").has_value());
  for (Pass p : {Pass::forward, Pass::backward, Pass::input, Pass::weight})
    CHECK(pass_named(to_string(p)) == p);
  CHECK_FALSE(pass_named("update").has_value());
  CHECK(utilisation_symbol({Schedule::interleaved, 4, 8, 2}) == "vM/(vM+P-1)");
  CHECK(utilisation_fraction({Schedule::interleaved, 4, 8, 2}) == "16/19");
}
