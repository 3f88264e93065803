// Element-wise host arithmetic of float16/bfloat16 (buffer_ops.h): scaling in float32 with one
// rounding to nearest even, and ReduceHalves, the MPI backend's operation for halves where the
// MPI library has none. Its results must not depend on the order in which an algorithm
// combines the ranks' values (commutative on bits), and must round like the library's own.
#include <cstdint>
#include <random>
#include <vector>

#include "../buffer_ops.h"
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

TEST_F(BufferOpsTest, ReduceHalvesIsCommutativeOnBits) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
  for (DataType dtype : kHalves)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct}) {
      const int n = 4096;
      std::vector<uint16_t> a(n), b(n);
      for (int i = 0; i < n; ++i) {
        a[i] = Bits(value(random), dtype);
        b[i] = Bits(value(random), dtype);
      }
      std::vector<uint16_t> ab = b, ba = a;
      ReduceHalves(a.data(), ab.data(), n, dtype, op);
      ReduceHalves(b.data(), ba.data(), n, dtype, op);
      EXPECT_EQ(ab, ba) << DataTypeName(dtype) << " " << ReduceOpName(op);
    }
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
