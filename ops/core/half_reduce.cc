#include "half_reduce.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "buffer_ops.h"

namespace kerashvd {
namespace {

constexpr uint16_t kFp16Nan = 0x7E00;
constexpr uint16_t kBf16Nan = 0x7FC0;

template <bool kProduct>
float Apply(float x, float y) {
  return kProduct ? x * y : x + y;
}

template <bool kBf16, bool kProduct>
void Scalar(const uint16_t* a, uint16_t* b, int64_t begin, int64_t end) {
  const DataType dtype = kBf16 ? DataType::kBfloat16 : DataType::kFloat16;
  for (int64_t i = begin; i < end; ++i) {
    const float v = Apply<kProduct>(HalfToFloatOne(a[i], dtype), HalfToFloatOne(b[i], dtype));
    b[i] = std::isnan(v) ? (kBf16 ? kBf16Nan : kFp16Nan) : FloatToHalfOne(v, dtype);
  }
}

#if defined(__x86_64__)
// float16: the F16C conversions (round to nearest even, as FloatToHalfOne).
template <bool kProduct>
__attribute__((target("avx2,f16c"))) void VectorFp16(const uint16_t* a, uint16_t* b,
                                                     int64_t n) {
  const __m128i nan = _mm_set1_epi16(static_cast<short>(kFp16Nan));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    const __m256 v = kProduct ? _mm256_mul_ps(x, y) : _mm256_add_ps(x, y);
    const __m128i halves = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // All ones where v is NaN, as eight 16-bit lanes (the 32-bit mask packed with saturation).
    const __m256i unordered = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m128i mask = _mm_packs_epi32(_mm256_castsi256_si128(unordered),
                                         _mm256_extracti128_si256(unordered, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + i), _mm_blendv_epi8(halves, nan, mask));
  }
  Scalar<false, kProduct>(a, b, i, n);
}

// bfloat16: widening is a shift; narrowing rounds to nearest even in integer arithmetic, both
// of which the compiler vectorizes for AVX2.
template <bool kProduct>
__attribute__((target("avx2"))) void VectorBf16(const uint16_t* a, uint16_t* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t xa = static_cast<uint32_t>(a[i]) << 16, xb = static_cast<uint32_t>(b[i]) << 16;
    float x, y;
    std::memcpy(&x, &xa, 4);
    std::memcpy(&y, &xb, 4);
    const float v = Apply<kProduct>(x, y);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const uint16_t rounded = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    b[i] = v != v ? kBf16Nan : rounded;
  }
}

bool HasVectorPath() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
bool HasVectorPath() { return false; }
#endif

template <bool kProduct>
void Reduce(const uint16_t* a, uint16_t* b, int64_t n, bool bf16, bool vector) {
#if defined(__x86_64__)
  if (vector) {
    if (bf16) VectorBf16<kProduct>(a, b, n);
    else VectorFp16<kProduct>(a, b, n);
    return;
  }
#else
  (void)vector;
#endif
  if (bf16) Scalar<true, kProduct>(a, b, 0, n);
  else Scalar<false, kProduct>(a, b, 0, n);
}

void Dispatch(const void* in, void* inout, int64_t count, DataType dtype, ReduceOp op,
              bool vector) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  const bool bf16 = dtype == DataType::kBfloat16;
  if (op == ReduceOp::kProduct) Reduce<true>(a, b, count, bf16, vector);
  else Reduce<false>(a, b, count, bf16, vector);
}

}  // namespace

bool HalvesVectorized() {
  static const bool vector = HasVectorPath();
  return vector;
}

void ReduceHalves(const void* in, void* inout, int64_t count, DataType dtype, ReduceOp op) {
  Dispatch(in, inout, count, dtype, op, HalvesVectorized());
}

void ReduceHalvesScalar(const void* in, void* inout, int64_t count, DataType dtype,
                        ReduceOp op) {
  Dispatch(in, inout, count, dtype, op, false);
}

}  // namespace kerashvd
