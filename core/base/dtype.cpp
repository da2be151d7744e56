#include "core/base/dtype.hpp"

namespace distlab {

const char* to_string(DType t) {
  switch (t) {
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
  }
  return 1;
}

}  // namespace distlab
