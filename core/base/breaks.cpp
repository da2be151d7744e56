#include "core/base/breaks.hpp"

#include <utility>

namespace distlab {

namespace {
std::string& active() {
  static std::string name;
  return name;
}
}  // namespace

bool broken(std::string_view name) {
  return !active().empty() && active() == name;
}

BreakSwitch::BreakSwitch(std::string name) : previous_(std::exchange(active(), std::move(name))) {}

BreakSwitch::~BreakSwitch() {
  active() = std::move(previous_);
}

}  // namespace distlab
