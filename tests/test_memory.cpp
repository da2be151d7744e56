// memory_ledger.hpp and buffer.hpp: the ledger charges every buffer to a category for its lifetime.
#include "catch.hpp"

#include <utility>

#include "core/base/check.hpp"
#include "core/device/buffer.hpp"
#include "core/device/memory_ledger.hpp"
#include "core/trace/recorder.hpp"

using namespace distlab;

TEST_CASE("ledger: charge and release track current and peak per category and in total",
          "[memory]") {
  Ledger ledger;
  ledger.charge(Category::params, 100);
  ledger.charge(Category::grads, 40);
  ledger.charge(Category::params, 28);
  CHECK(ledger.current(Category::params) == 128);
  CHECK(ledger.current(Category::grads) == 40);
  CHECK(ledger.current(Category::optimizer) == 0);
  CHECK(ledger.current_total() == 168);
  CHECK(ledger.peak_total() == 168);

  ledger.release(Category::params, 100);
  CHECK(ledger.current(Category::params) == 28);
  CHECK(ledger.peak(Category::params) == 128);  // the peak stays
  CHECK(ledger.current_total() == 68);
  CHECK(ledger.peak_total() == 168);

  // A new high in one category while another shrank: the total's peak is of the sum at one
  // moment (28 + 40 + 120 = 188), not the sum of the categories' peaks (128 + 40 + 120).
  ledger.charge(Category::optimizer, 120);
  CHECK(ledger.peak(Category::optimizer) == 120);
  CHECK(ledger.peak_total() == 188);
  CHECK(ledger.peaks()[static_cast<int>(Category::params)] == 128);
  CHECK(ledger.peaks()[static_cast<int>(Category::grads)] == 40);
  CHECK(ledger.peaks()[static_cast<int>(Category::comm)] == 0);
}

TEST_CASE("ledger: releasing more than is charged is an error naming the category", "[memory]") {
  Ledger ledger;
  ledger.charge(Category::comm, 10);
  CHECK_THROWS_AS(ledger.release(Category::comm, 11), Error);
  CHECK_THROWS_WITH(ledger.release(Category::comm, 11),
                    Catch::Contains("comm") && Catch::Contains("11"));
  CHECK_THROWS_AS(ledger.release(Category::params, 1), Error);
  CHECK(ledger.current(Category::comm) == 10);  // a refused release changes nothing
  ledger.release(Category::comm, 10);
  CHECK(ledger.current_total() == 0);
}

TEST_CASE("ledger: every change is a counter sample in the recorder", "[memory]") {
  Recorder recorder(3);
  Ledger ledger(&recorder);
  ledger.charge(Category::params, 64);
  ledger.charge(Category::activations, 32);
  ledger.release(Category::params, 64);
  ledger.charge(Category::grads, 0);  // no change, no sample
  const auto& c = recorder.log().counters;
  REQUIRE(c.size() == 3);
  const int p = static_cast<int>(Category::params), a = static_cast<int>(Category::activations);
  CHECK(c[0].bytes[p] == 64);
  CHECK(c[0].bytes[a] == 0);
  CHECK(c[1].bytes[p] == 64);
  CHECK(c[1].bytes[a] == 32);
  CHECK(c[2].bytes[p] == 0);
  CHECK(c[2].bytes[a] == 32);
  CHECK(c[0].ts <= c[1].ts);
  CHECK(c[1].ts <= c[2].ts);

  recorder.set_enabled(false);
  ledger.charge(Category::params, 8);
  CHECK(recorder.log().counters.size() == 3);  // a disabled recorder records nothing
}

TEST_CASE("ledger: a ledger with a parent keeps its own peaks and charges the parent too",
          "[memory]") {
  Recorder recorder(0);
  Ledger rank(&recorder);  // the rank's: its changes are the trace's counters
  rank.charge(Category::data, 100);
  {
    Ledger part(nullptr, &rank);  // one configuration of lesson 16, measured on its own
    part.charge(Category::params, 64);
    part.charge(Category::params, 32);
    part.release(Category::params, 32);
    CHECK(part.peak(Category::params) == 96);
    CHECK(part.peak_total() == 96);  // its own: without the rank's data
    CHECK(rank.current(Category::params) == 64);
    CHECK(rank.peak_total() == 196);  // the rank's: both
    part.release(Category::params, 64);
  }
  CHECK(rank.current(Category::params) == 0);
  CHECK(rank.current_total() == 100);
  // Every change of the part is a sample of the rank's counter: 1 + 4.
  const auto& c = recorder.log().counters;
  REQUIRE(c.size() == 5);
  CHECK(c[2].bytes[static_cast<int>(Category::params)] == 96);
}

TEST_CASE("buffer: charges on construction, releases on destruction", "[memory][buffer]") {
  Ledger ledger;
  {
    Buffer<float> a(ledger, Category::params, 100);
    CHECK(ledger.current(Category::params) == 400);
    Buffer<double> b(ledger, Category::optimizer, 10);
    CHECK(ledger.current(Category::optimizer) == 80);
    CHECK(ledger.current_total() == 480);
    CHECK(a.size() == 100);
    CHECK(a.category() == Category::params);
    CHECK(a.device() == Device::cpu);
    for (float x : a.host()) CHECK(x == 0.0f);  // zero-initialised
  }
  CHECK(ledger.current_total() == 0);
  CHECK(ledger.peak_total() == 480);
}

TEST_CASE("buffer: a move transfers the charge once, move-assignment releases the old one",
          "[memory][buffer]") {
  Ledger ledger;
  Buffer<float> a(ledger, Category::grads, 16);
  a[3] = 7.0f;
  Buffer<float> b(std::move(a));
  CHECK(ledger.current(Category::grads) == 64);  // still one buffer's worth
  CHECK(a.size() == 0);
  CHECK(a.data() == nullptr);
  CHECK(b.size() == 16);
  CHECK(b[3] == 7.0f);

  Buffer<float> c(ledger, Category::activations, 8);
  CHECK(ledger.current_total() == 96);
  c = std::move(b);  // c's activations are released, b's grads move into c
  CHECK(ledger.current(Category::activations) == 0);
  CHECK(ledger.current(Category::grads) == 64);
  CHECK(c.category() == Category::grads);
  CHECK(c[3] == 7.0f);

  { Buffer<float> sink(std::move(c)); }
  CHECK(ledger.current_total() == 0);

  Buffer<float> d(ledger, Category::data, 4);
  d.reset();
  CHECK(ledger.current_total() == 0);
  d.reset();  // twice is harmless
  CHECK(ledger.current_total() == 0);
}

TEST_CASE("buffer: an empty buffer charges nothing, views check their range", "[memory][buffer]") {
  Ledger ledger;
  Buffer<std::int64_t> empty(ledger, Category::comm, 0);
  CHECK(ledger.current_total() == 0);
  CHECK(empty.view().empty());

  Buffer<std::int32_t> buf(ledger, Category::data, 10);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::int32_t>(i);
  View<std::int32_t> v = buf.sub(3, 4);
  CHECK(v.size() == 4);
  CHECK(v.bytes() == 16);
  CHECK(v[0] == 3);
  CHECK(v.sub(1, 3)[2] == 6);
  CHECK_NOTHROW(buf.sub(10, 0));
  CHECK_THROWS_AS(buf.sub(8, 3), Error);
  CHECK_THROWS_WITH(buf.sub(8, 3), Catch::Contains("[8, 11)") && Catch::Contains("10 elements"));
  View<const std::int32_t> cv = v;
  CHECK(cv.host().size() == 4);
  View<float> device_view{nullptr, 4, Device::cuda};
  CHECK_THROWS_AS(device_view.host(), Error);
}
