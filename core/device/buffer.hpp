// buffer.hpp — typed views and owning buffers, on the CPU or (later) a GPU.
//
// View<T> is a pointer, a length and a device: what transports and ops take.
// Buffer<T> owns memory from device_alloc and charges it to a rank's memory ledger for as
// long as it lives. Lessons allocate with comm.alloc<T>(n, Category::...).
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/base/check.hpp"
#include "core/device/allocator.hpp"
#include "core/device/memory_ledger.hpp"

namespace distlab {

template <class T>
struct View {
  T* ptr = nullptr;
  std::size_t n = 0;
  Device device = Device::cpu;

  T* data() const { return ptr; }
  std::size_t size() const { return n; }
  std::size_t bytes() const { return n * sizeof(T); }
  bool empty() const { return n == 0; }

  // Elements [offset, offset + count).
  View sub(std::size_t offset, std::size_t count) const {
    DL_CHECK(offset + count <= n, "view [{}, {}) is out of range of a buffer of {} elements",
             offset, offset + count, n);
    return {ptr + offset, count, device};
  }
  operator View<const T>() const { return {ptr, n, device}; }

  // Host access; a CUDA view must be copied to the host first.
  std::span<T> host() const {
    DL_CHECK(device == Device::cpu, "host access to a {} buffer", to_string(device));
    return {ptr, n};
  }
  T& operator[](std::size_t i) const { return ptr[i]; }
};

// A host copy of a view's elements, wherever they live (a GPU view is copied back after the
// work on its rank's stream): for checks and printing, never on a hot path.
template <class T>
std::vector<std::remove_const_t<T>> to_host(View<T> v) {
  std::vector<std::remove_const_t<T>> out(v.n);
  device_copy(out.data(), Device::cpu, v.ptr, v.device, v.bytes());
  return out;
}

// Copies host elements into a view, wherever it lives.
template <class T>
void from_host(View<T> v, const std::vector<T>& values) {
  DL_CHECK(values.size() == v.n, "from_host: {} values for a view of {}", values.size(), v.n);
  device_copy(v.ptr, v.device, values.data(), Device::cpu, v.bytes());
}

template <class T>
class Buffer {
 public:
  Buffer() = default;
  // zero: fill with T{} (CPU); a workspace that is written before it is read can skip it.
  Buffer(Ledger& ledger, Category category, std::size_t n, Device device = Device::cpu,
         bool zero = true)
      : ledger_(&ledger), category_(category), view_{nullptr, n, device} {
    view_.ptr = static_cast<T*>(device_alloc(device, n * sizeof(T)));
    if (zero && device == Device::cpu)
      for (std::size_t i = 0; i < n; ++i) view_.ptr[i] = T{};
    else if (zero)
      device_zero(device, view_.ptr, n * sizeof(T));
    ledger_->charge(category_, n * sizeof(T));
  }
  ~Buffer() { reset(); }

  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ledger_ = std::exchange(o.ledger_, nullptr);
      category_ = o.category_;
      view_ = std::exchange(o.view_, View<T>{});
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() noexcept {
    if (ledger_) {
      device_free(view_.device, view_.ptr, view_.bytes());
      try {
        ledger_->release(category_, view_.bytes());
      } catch (...) {
      }
    }
    ledger_ = nullptr;
    view_ = {};
  }

  View<T> view() { return view_; }
  View<const T> view() const { return view_; }
  View<T> sub(std::size_t offset, std::size_t count) { return view_.sub(offset, count); }
  T* data() { return view_.ptr; }
  const T* data() const { return view_.ptr; }
  std::size_t size() const { return view_.n; }
  bool empty() const { return view_.n == 0; }
  std::span<T> host() { return view_.host(); }
  std::span<const T> host() const { return {view_.ptr, view_.n}; }
  T& operator[](std::size_t i) { return view_.ptr[i]; }
  const T& operator[](std::size_t i) const { return view_.ptr[i]; }
  Category category() const { return category_; }
  Device device() const { return view_.device; }

 private:
  Ledger* ledger_ = nullptr;
  Category category_ = Category::data;
  View<T> view_;
};

}  // namespace distlab
