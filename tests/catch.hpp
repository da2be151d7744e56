// catch.hpp — the tests' one door to Catch2, version 2 (Debian 12's catch2 2.13) or 3 (Debian
// 13's 3.7). Every test includes this and writes Catch2 2's names; under Catch2 3 the few that
// moved (Approx, the string and vector matchers, the session) are brought back here.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)  // Catch2 3: one header per part
#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <catch2/matchers/catch_matchers_vector.hpp>

#include <string>

using Catch::Approx;

namespace Catch {
// Catch2 2 spelled ContainsSubstring as Contains, and kept these in namespace Catch.
inline Matchers::StringContainsMatcher Contains(const std::string& text,
                                                CaseSensitive sensitive = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitive);
}
using Matchers::StartsWith;
using Matchers::VectorContains;
namespace Matchers::Exception {
using Matchers::ExceptionMessageMatcher;
}
}  // namespace Catch

#else  // Catch2 2: one header
#include <catch2/catch.hpp>
#endif
