// Element-wise host arithmetic of float16/bfloat16: scaling in float32 with one rounding to
// nearest even (buffer_ops.h), and ReduceHalves (half_reduce.h), the arithmetic of every host
// reduction of halves. Its results must not depend on the order in which an algorithm combines
// the ranks' values (commutative on bits, NaN included), and its vector path must give the
// bits of its scalar one.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../buffer_ops.h"
#include "../half_reduce.h"
#include "rank_threads_test.h"

namespace kerashvd {
namespace testing {
namespace {

using BufferOpsTest = RankThreadsTest;  // the suite of this file

constexpr DataType kHalves[] = {DataType::kFloat16, DataType::kBfloat16};

uint16_t Bits(float value, DataType dtype) { return FloatToHalfOne(value, dtype); }

TEST_F(BufferOpsTest, HalfBitsRoundTripAndRoundToNearestEven) {
  EXPECT_EQ(Bits(1.0f, DataType::kFloat16), 0x3C00);
  EXPECT_EQ(Bits(1.0f, DataType::kBfloat16), 0x3F80);
  EXPECT_EQ(HalfToFloatOne(0x4000, DataType::kFloat16), 2.0f);
  EXPECT_EQ(HalfToFloatOne(0x4000, DataType::kBfloat16), 2.0f);
  // 2049 lies halfway between float16's 2048 and 2050: the even mantissa (2048) wins; 2051
  // lies between 2050 and 2052: 2052.
  EXPECT_EQ(HalfToFloatOne(Bits(2049.0f, DataType::kFloat16), DataType::kFloat16), 2048.0f);
  EXPECT_EQ(HalfToFloatOne(Bits(2051.0f, DataType::kFloat16), DataType::kFloat16), 2052.0f);
  EXPECT_EQ(Bits(70000.0f, DataType::kFloat16), 0x7C00);  // past float16's range: +inf
}

TEST_F(BufferOpsTest, ScaleCopyScalesHalvesInFloat32) {
  for (DataType dtype : kHalves) {
    std::vector<uint16_t> in = {Bits(1.5f, dtype), Bits(-3.0f, dtype), Bits(0.0f, dtype)};
    std::vector<uint16_t> out(3);
    ScaleCopy(in.data(), out.data(), 3, dtype, 0.25);
    EXPECT_EQ(HalfToFloatOne(out[0], dtype), 0.375f) << DataTypeName(dtype);
    EXPECT_EQ(HalfToFloatOne(out[1], dtype), -0.75f) << DataTypeName(dtype);
    EXPECT_EQ(out[2], 0) << DataTypeName(dtype);
    ScaleCopy(in.data(), in.data(), 3, dtype, 1.0);  // in place, factor 1: unchanged
    EXPECT_EQ(HalfToFloatOne(in[0], dtype), 1.5f);
  }
}

TEST_F(BufferOpsTest, ReduceHalvesSumsAndMultipliesWithOneRounding) {
  for (DataType dtype : kHalves) {
    std::vector<uint16_t> a = {Bits(1.0f, dtype), Bits(2.5f, dtype), Bits(-1.0f, dtype)};
    std::vector<uint16_t> b = {Bits(1.0f, dtype), Bits(4.0f, dtype), Bits(1.0f, dtype)};
    std::vector<uint16_t> sum = b, product = b;
    ReduceHalves(a.data(), sum.data(), 3, dtype, ReduceOp::kSum);
    ReduceHalves(a.data(), product.data(), 3, dtype, ReduceOp::kProduct);
    EXPECT_EQ(HalfToFloatOne(sum[0], dtype), 2.0f) << DataTypeName(dtype);
    EXPECT_EQ(HalfToFloatOne(sum[1], dtype), 6.5f) << DataTypeName(dtype);
    EXPECT_EQ(HalfToFloatOne(sum[2], dtype), 0.0f) << DataTypeName(dtype);
    EXPECT_EQ(HalfToFloatOne(product[1], dtype), 10.0f) << DataTypeName(dtype);
    EXPECT_EQ(HalfToFloatOne(product[2], dtype), -1.0f) << DataTypeName(dtype);
  }
  // float16: 2048 + 1 rounds back to 2048; 65504 + 65504 overflows to +inf.
  uint16_t x[2] = {Bits(1.0f, DataType::kFloat16), Bits(65504.0f, DataType::kFloat16)};
  uint16_t y[2] = {Bits(2048.0f, DataType::kFloat16), Bits(65504.0f, DataType::kFloat16)};
  ReduceHalves(x, y, 2, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(HalfToFloatOne(y[0], DataType::kFloat16), 2048.0f);
  EXPECT_EQ(y[1], 0x7C00);
}

// Random halves of every kind: normal values over the whole range, subnormals, zeros of both
// signs, infinities and NaNs with payloads.
std::vector<uint16_t> RandomHalves(std::mt19937* random, int n) {
  std::uniform_int_distribution<int> bits(0, 0xFFFF), kind(0, 15);
  std::vector<uint16_t> out(n);
  for (int i = 0; i < n; ++i) {
    out[i] = static_cast<uint16_t>(bits(*random));
    if (kind(*random) == 0) out[i] &= 0x83FF;  // subnormal or zero, either sign
  }
  return out;
}

TEST_F(BufferOpsTest, ReduceHalvesIsCommutativeOnBitsNanIncluded) {
  std::mt19937 random(7);
  for (DataType dtype : kHalves)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct}) {
      const int n = 1 << 16;
      const std::vector<uint16_t> a = RandomHalves(&random, n), b = RandomHalves(&random, n);
      std::vector<uint16_t> ab = b, ba = a;
      ReduceHalves(a.data(), ab.data(), n, dtype, op);
      ReduceHalves(b.data(), ba.data(), n, dtype, op);
      EXPECT_EQ(ab, ba) << DataTypeName(dtype) << " " << ReduceOpName(op);
      const uint16_t nan = dtype == DataType::kFloat16 ? 0x7E00 : 0x7FC0;
      int nans = 0;
      for (int i = 0; i < n; ++i) {
        if (!std::isnan(HalfToFloatOne(ab[i], dtype))) continue;
        ++nans;
        ASSERT_EQ(ab[i], nan) << "element " << i << ": NaN is always the canonical one";
      }
      EXPECT_GT(nans, 0);
    }
}

TEST_F(BufferOpsTest, ReduceHalvesVectorPathGivesTheScalarBits) {
  if (!HalvesVectorized()) GTEST_SKIP() << "this CPU has no F16C/AVX2: only the scalar path runs";
  std::mt19937 random(11);
  for (DataType dtype : kHalves)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct})
      for (int n : {0, 1, 7, 8, 9, 17, 1 << 16}) {  // whole vectors and tails
        const std::vector<uint16_t> a = RandomHalves(&random, n), b = RandomHalves(&random, n);
        std::vector<uint16_t> vector = b, scalar = b;
        ReduceHalves(a.data(), vector.data(), n, dtype, op);
        ReduceHalvesScalar(a.data(), scalar.data(), n, dtype, op);
        EXPECT_EQ(vector, scalar) << DataTypeName(dtype) << " " << ReduceOpName(op) << " " << n;
      }
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
