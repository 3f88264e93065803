#include "buffer_ops.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kerashvd {
namespace {

template <typename T>
void ScaleTyped(const T* src, T* dst, int64_t n, double factor) {
  if (factor == 1.0) {
    if (src != dst) std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = ScaleOne(src[i], factor);
}

float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a NaN
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);                       // nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Fp16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000 | (mant << 13);  // inf or nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: value = mant * 2^-24
    float f = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7E00;
  if (a >= 65520.0f) return sign | 0x7C00;  // rounds to infinity
  if (a < 6.103515625e-05f) {               // subnormal range: multiples of 2^-24
    float scaled = a * 16777216.0f;         // exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // nearest even by default
  }
  uint32_t abits = bits & 0x7FFFFFFF;
  uint32_t exp = (abits >> 23) - 112;
  uint32_t mant = abits & 0x7FFFFF;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // nearest even; may carry
  return sign | static_cast<uint16_t>(half);
}

}  // namespace

float HalfToFloatOne(uint16_t bits, DataType dtype) {
  return dtype == DataType::kBfloat16 ? Bf16ToFloat(bits) : Fp16ToFloat(bits);
}

uint16_t FloatToHalfOne(float value, DataType dtype) {
  return dtype == DataType::kBfloat16 ? FloatToBf16(value) : FloatToFp16(value);
}

void ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kUint8: ScaleTyped(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), count, factor); break;
    case DataType::kInt8: ScaleTyped(static_cast<const int8_t*>(src), static_cast<int8_t*>(dst), count, factor); break;
    case DataType::kInt32: ScaleTyped(static_cast<const int32_t*>(src), static_cast<int32_t*>(dst), count, factor); break;
    case DataType::kInt64: ScaleTyped(static_cast<const int64_t*>(src), static_cast<int64_t*>(dst), count, factor); break;
    case DataType::kFloat32: ScaleTyped(static_cast<const float*>(src), static_cast<float*>(dst), count, factor); break;
    case DataType::kFloat64: ScaleTyped(static_cast<const double*>(src), static_cast<double*>(dst), count, factor); break;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      if (factor != 1.0) {
        const uint16_t* in = static_cast<const uint16_t*>(src);
        uint16_t* out = static_cast<uint16_t*>(dst);
        const float f = static_cast<float>(factor);
        for (int64_t i = 0; i < count; ++i)
          out[i] = FloatToHalfOne(HalfToFloatOne(in[i], dtype) * f, dtype);
        break;
      }
      [[fallthrough]];
    default:
      if (src != dst) std::memcpy(dst, src, count * DataTypeSize(dtype));
  }
}

void HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype, double factor) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  const float f = static_cast<float>(factor);
  if (dtype == DataType::kBfloat16) {
    for (int64_t i = 0; i < count; ++i) dst[i] = Bf16ToFloat(h[i]) * f;
  } else {
    for (int64_t i = 0; i < count; ++i) dst[i] = Fp16ToFloat(h[i]) * f;
  }
}

void FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype, double factor) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  const float f = static_cast<float>(factor);
  if (dtype == DataType::kBfloat16) {
    for (int64_t i = 0; i < count; ++i) h[i] = FloatToBf16(src[i] * f);
  } else {
    for (int64_t i = 0; i < count; ++i) h[i] = FloatToFp16(src[i] * f);
  }
}

namespace {

template <typename T>
uint64_t BitsOf(T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));  // the low bytes on the little-endian hosts we build for
  return bits;
}

template <typename T>
uint64_t TypedIdentity(ReduceOp op) {
  using L = std::numeric_limits<T>;
  switch (op) {
    case ReduceOp::kProduct: return BitsOf(static_cast<T>(1));
    case ReduceOp::kMax: return BitsOf(L::has_infinity ? -L::infinity() : L::lowest());
    case ReduceOp::kMin: return BitsOf(L::has_infinity ? L::infinity() : L::max());
    case ReduceOp::kSum:
    case ReduceOp::kAverage: break;
  }
  return 0;
}

// float16 / bfloat16 bit patterns: one, -inf and +inf.
uint64_t HalfIdentity(ReduceOp op, uint16_t one, uint16_t neg_inf, uint16_t pos_inf) {
  switch (op) {
    case ReduceOp::kProduct: return one;
    case ReduceOp::kMax: return neg_inf;
    case ReduceOp::kMin: return pos_inf;
    case ReduceOp::kSum:
    case ReduceOp::kAverage: break;
  }
  return 0;
}

}  // namespace

uint64_t IdentityBits(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUint8: return TypedIdentity<uint8_t>(op);
    case DataType::kInt8: return TypedIdentity<int8_t>(op);
    case DataType::kUint16: return TypedIdentity<uint16_t>(op);
    case DataType::kInt16: return TypedIdentity<int16_t>(op);
    case DataType::kInt32: return TypedIdentity<int32_t>(op);
    case DataType::kInt64: return TypedIdentity<int64_t>(op);
    case DataType::kFloat16: return HalfIdentity(op, 0x3C00, 0xFC00, 0x7C00);
    case DataType::kBfloat16: return HalfIdentity(op, 0x3F80, 0xFF80, 0x7F80);
    case DataType::kFloat32: return TypedIdentity<float>(op);
    case DataType::kFloat64: return TypedIdentity<double>(op);
    case DataType::kBool: return TypedIdentity<bool>(op);
  }
  return 0;
}

void FillIdentity(void* dst, int64_t count, DataType dtype, ReduceOp op) {
  const size_t width = DataTypeSize(dtype);
  const uint64_t bits = IdentityBits(dtype, op);
  if (bits == 0) {
    if (count > 0) std::memset(dst, 0, count * width);
    return;
  }
  char* out = static_cast<char*>(dst);
  for (int64_t i = 0; i < count; ++i) std::memcpy(out + i * width, &bits, width);
}

}  // namespace kerashvd
