// Value types shared by every layer of the engine: data types, reduce ops, collective kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kerashvd {

// Numbering is part of the wire format between ranks and of the Python binding.
enum class DataType : uint8_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBfloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
};

enum class ReduceOp : uint8_t { kAverage = 0, kSum = 1, kMin = 2, kMax = 3, kProduct = 4 };

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
};

using Shape = std::vector<int64_t>;

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* OpTypeName(OpType op);
// Whether reductions (allreduce, reducescatter) accept this dtype.
bool IsReducible(DataType dtype);
// float16 and bfloat16 are reduced in float32 and rounded once at the end.
bool IsHalf(DataType dtype);
bool IsFloating(DataType dtype);

int64_t NumElements(const Shape& shape);
// Elements in one row (all dimensions but the first); 1 for a scalar or a vector.
int64_t RowElements(const Shape& shape);
std::string ShapeString(const Shape& shape);

// "[0, 2, 3]": ranks as messages show them.
std::string RankList(const std::vector<int>& ranks);

}  // namespace kerashvd
