// dtype.hpp — the element types a buffer or message can hold, and their sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace distlab {

// Element types a buffer or message can hold. f16 and bf16 are Half and BFloat16 (half.hpp).
enum class DType : std::uint8_t { u8, i32, i64, f32, f64, f16, bf16 };

struct Half;
struct BFloat16;

const char* to_string(DType t);
std::size_t dtype_size(DType t);

template <class T>
constexpr DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, std::uint8_t> || std::is_same_v<U, char> ||
                std::is_same_v<U, std::byte>)
    return DType::u8;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return DType::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>)
    return DType::i64;
  else if constexpr (std::is_same_v<U, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<U, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<U, Half>)
    return DType::f16;
  else if constexpr (std::is_same_v<U, BFloat16>)
    return DType::bf16;
  else
    static_assert(sizeof(T) == 0, "distlab: unsupported element type");
}

}  // namespace distlab
