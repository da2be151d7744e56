// units.hpp — sizes and times as people type and read them.
//
// parse_size("64M") == 64 * 2^20. Suffixes K, M, G (also Ki, Mi, Gi) are powers of 1024;
// the count is in elements of the lesson's element type (bytes for lesson 01).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace distlab {

// Parses "1000", "4K", "64M", "1G" (case-insensitive, optional "i"). Throws UsageError.
std::uint64_t parse_size(const std::string& text);

// 1536 -> "1.50 KiB"; 8 -> "8 B" (three significant digits).
std::string format_bytes(double bytes);

// seconds -> "12.3 us", "4.56 ms", "1.23 s".
std::string format_seconds(double seconds);

// 65536 -> "64K" when exact, else the plain number.
std::string format_count(std::uint64_t n);

}  // namespace distlab
