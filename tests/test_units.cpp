// units.hpp: sizes as people type them, bytes and times as people read them.
#include "catch.hpp"

#include "core/base/check.hpp"
#include "core/base/units.hpp"

using namespace distlab;

TEST_CASE("parse_size reads plain counts and power-of-1024 suffixes", "[units]") {
  CHECK(parse_size("0") == 0);
  CHECK(parse_size("1") == 1);
  CHECK(parse_size("1000") == 1000);
  CHECK(parse_size("4K") == 4096);
  CHECK(parse_size("4k") == 4096);
  CHECK(parse_size("4Ki") == 4096);
  CHECK(parse_size("4KI") == 4096);
  CHECK(parse_size("4ki") == 4096);
  CHECK(parse_size("64M") == 64ull << 20);
  CHECK(parse_size("64Mi") == 64ull << 20);
  CHECK(parse_size("1G") == 1ull << 30);
  CHECK(parse_size("3g") == 3ull << 30);
  CHECK(parse_size("1Gi") == 1ull << 30);
  CHECK(parse_size("007") == 7);
}

TEST_CASE("parse_size rejects what is not a size with a UsageError", "[units]") {
  for (const char* bad : {"", "K", "-1", "+4", " 4", "4 ", "4KB", "4T", "4Kx", "1.5M", "0x10",
                          "four", "4KiB", "1e6", "99999999999999999"}) {
    INFO("input '" << bad << "'");
    CHECK_THROWS_AS(parse_size(bad), UsageError);
  }
  // The message quotes the input and says what would be right.
  CHECK_THROWS_WITH(parse_size("12Q"), Catch::Contains("'12Q'") && Catch::Contains("K, M or G"));
  CHECK_THROWS_WITH(parse_size("abc"), Catch::Contains("'abc'") && Catch::Contains("e.g."));
}

TEST_CASE("parse_size refuses an 'i' with no K, M or G before it", "[units]") {
  // "4i" is no size anyone means; it must not silently read as 4.
  CHECK_THROWS_AS(parse_size("4i"), UsageError);
}

TEST_CASE("parse_size refuses sizes that overflow 64 bits instead of wrapping", "[units]") {
  // 15 digits pass the length guard, but 999999999999999 * 2^30 is about 1.07e24 > 2^64.
  CHECK_THROWS_AS(parse_size("999999999999999G"), UsageError);
  CHECK_THROWS_AS(parse_size("17179869184G"), UsageError);    // exactly 2^64
  CHECK(parse_size("17179869183G") == 17179869183ull << 30);  // the largest that fits
}

TEST_CASE("format_bytes picks a binary unit and 3 significant digits", "[units]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(8) == "8 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(10 * 1024) == "10.0 KiB");
  CHECK(format_bytes(100 * 1024) == "100 KiB");
  CHECK(format_bytes(1 << 20) == "1.00 MiB");
  CHECK(format_bytes(64.0 * (1 << 20)) == "64.0 MiB");
  CHECK(format_bytes(double(1ull << 30)) == "1.00 GiB");
  CHECK(format_bytes(double(3ull << 40)) == "3.00 TiB");
  CHECK(format_bytes(double(2048ull << 40)) == "2048 TiB");  // no unit past TiB
}

TEST_CASE("format_seconds and format_count", "[units]") {
  CHECK(format_seconds(12.3e-6) == "12.3 us");
  CHECK(format_seconds(4.56e-3) == "4.56 ms");
  CHECK(format_seconds(1.234) == "1.23 s");
  CHECK(format_count(65536) == "64K");
  CHECK(format_count(1 << 20) == "1M");
  CHECK(format_count(3ull << 30) == "3G");
  CHECK(format_count(1000) == "1000");
  CHECK(format_count(1025) == "1025");
  CHECK(format_count(0) == "0");
  // format_count's output reads back through parse_size: lessons print defaults this way.
  for (std::uint64_t n : {0ull, 7ull, 4096ull, 5ull << 20, 1ull << 30, 12345ull})
    CHECK(parse_size(format_count(n)) == n);
}
