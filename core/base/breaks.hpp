// breaks.hpp — `--break NAME`: a classic bug, switched on by name at the line where it lives.
//
// A lesson declares the bugs it can carry (Lesson::add_break: a name and the mistake in one
// sentence); `--break NAME` switches one on for the whole run, and the code that carries it asks
//
//   const int slot = broken("gather-wrong-slot") ? (src + 1) % n : src;
//
// The lesson's checks must then fail: a break is a test of the checks, and a student's way to
// see what each one guards. The switch is set once, before any rank starts, and only read while
// they run, so ranks read it without a lock.
#pragma once

#include <string>
#include <string_view>

namespace distlab {

// True when this run switched on the break called `name`.
bool broken(std::string_view name);

// The break switched on ("" for none) for this object's life: the lesson frame holds one around
// a run, so a test that runs lessons in one process does not leak a break into the next.
class BreakSwitch {
 public:
  explicit BreakSwitch(std::string name);
  ~BreakSwitch();
  BreakSwitch(const BreakSwitch&) = delete;
  BreakSwitch& operator=(const BreakSwitch&) = delete;

 private:
  std::string previous_;
};

}  // namespace distlab
