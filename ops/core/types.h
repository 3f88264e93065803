// Value types shared by every layer of the engine: data types, reduce ops, collective kinds.
//
// Each enum below has one table (DataTypes(), ReduceOps(), OpTypes()) that says everything
// else there is to know about its values: names, sizes, what accepts them. The TF ops
// (ops/tf) and Python (kerashvd._core, ops/python/facts.cc) read these tables instead of
// keeping their own lists, so a value is added or renamed here and nowhere else.
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

// One row per DataType. `name` is numpy's and TensorFlow's Python name (tf.as_dtype(name)).
struct DataTypeInfo {
  DataType dtype;
  const char* name;
  size_t size;     // bytes per element
  bool reducible;  // accepted by allreduce and reducescatter
};
const std::vector<DataTypeInfo>& DataTypes();

// Python's number for Horovod's adaptive summation (hvd.Adasum). It is no ReduceOp: scripts
// that name it import and run, and every collective refuses it.
constexpr int kAdasum = 5;

// One row per reduce op, under the name Python gives it (kerashvd.Sum, ...); the last row is
// Adasum, known but not implemented.
struct ReduceOpInfo {
  int value;         // static_cast<int>(ReduceOp), or kAdasum
  const char* name;
  bool implemented;  // false: known to Horovod's users, refused by every collective
  bool scatter;      // accepted by reducescatter as well as allreduce
};
const std::vector<ReduceOpInfo>& ReduceOps();
// The row of a reduce op's number, or nullptr for a number that names none.
const ReduceOpInfo* FindReduceOp(int value);

// One row per collective kind, under the name Python's errors and the timeline use.
struct OpTypeInfo {
  OpType op;
  const char* name;
  bool reportable;  // a rank may fail it for all ranks with KerashvdReportError (controller.h)
};
const std::vector<OpTypeInfo>& OpTypes();
// The row of an OpType's number, or nullptr.
const OpTypeInfo* FindOpType(int value);

using Shape = std::vector<int64_t>;

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* OpTypeName(OpType op);
// Whether reductions (allreduce, reducescatter) accept this dtype.
bool IsReducible(DataType dtype);
// "Average, Sum, Min, Max, Product": the implemented reduce ops (with `scatter_only`, those
// reducescatter accepts), for messages.
std::string ReduceOpNames(bool scatter_only);
// "allreduce, allgather, ...": the op types a rank may report an error for, for messages.
std::string ReportableOpTypeNames();
bool IsHalf(DataType dtype);
// The type a reduction of `dtype` by `op` travels and is reduced in (fusion buffer, backend).
// float16 and bfloat16 are summed and multiplied in their own type: half the bytes of float32
// on the wire, each step of the reduction rounded to the type, as every backend does natively
// (MPICH's MPIX_C_FLOAT16/MPIX_BFLOAT16, NCCL's ncclFloat16/ncclBfloat16). Their Min and Max
// travel as float32, where the backends' NaN rule is implemented; the values are the same,
// since taking a minimum or maximum rounds nothing. Every other dtype is its own wire type.
DataType WireType(DataType dtype, ReduceOp op);
bool IsFloating(DataType dtype);

int64_t NumElements(const Shape& shape);
// Elements in one row (all dimensions but the first); 1 for a scalar or a vector.
int64_t RowElements(const Shape& shape);
std::string ShapeString(const Shape& shape);

// "[0, 2, 3]": ranks as messages show them.
std::string RankList(const std::vector<int>& ranks);

}  // namespace kerashvd
