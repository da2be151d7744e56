// ops.hpp — the compute the lessons need, on whichever device the buffers live.
//
// Every op takes Views and checks that they sit on one device. The CPU versions are plain
// loops the compiler vectorises; the CUDA versions (kernels and cuBLAS) slot in behind the
// same calls, so lesson code never changes with the device.
#pragma once

#include "buffer.hpp"
#include "check.hpp"

namespace distlab::ops {

namespace detail {
template <class A, class B>
void same_shape(const A& a, const B& b, const char* op) {
  DL_CHECK(a.size() == b.size(), "ops::{}: sizes differ ({} vs {})", op, a.size(), b.size());
  DL_CHECK(a.device == b.device, "ops::{}: buffers on different devices ({} vs {})", op, to_string(a.device),
           to_string(b.device));
  DL_CHECK(a.device == Device::cpu, "ops::{} on {} is not built yet", op, to_string(a.device));
}
}  // namespace detail

// dst += src   (dst, src are (n))
template <class T>
void add(View<T> dst, View<const T> src) {
  detail::same_shape(dst, src, "add");
  T* d = dst.ptr;
  const T* s = src.ptr;
  for (std::size_t i = 0; i < dst.n; ++i) d[i] += s[i];
}

// dst = src; a no-op when they are the same memory.
template <class T>
void copy(View<T> dst, View<const T> src) {
  detail::same_shape(dst, src, "copy");
  if (dst.ptr == src.ptr) return;
  device_copy(dst.ptr, dst.device, src.ptr, src.device, dst.bytes());
}

// dst[i] = value
template <class T>
void fill(View<T> dst, T value) {
  DL_CHECK(dst.device == Device::cpu, "ops::fill on {} is not built yet", to_string(dst.device));
  for (std::size_t i = 0; i < dst.n; ++i) dst.ptr[i] = value;
}

}  // namespace distlab::ops
