// intervals.hpp — unions of time spans and their overlap: how much communication ran under
// computation (lesson 16's table, the viewer's overlap counter).
#pragma once

#include <utility>
#include <vector>

namespace distlab {

using Intervals = std::vector<std::pair<double, double>>;  // [begin, end), microseconds

// The union of `spans`: sorted by start, overlapping and touching ones merged.
Intervals merged(Intervals spans);
// The part of merged `a` that lies in merged `b`.
Intervals intersection(const Intervals& a, const Intervals& b);
// Total length of merged `u`.
double length(const Intervals& u);
// Total length of merged `u` before `t` (all of it when t is past its end).
double length_before(const Intervals& u, double t);

}  // namespace distlab
