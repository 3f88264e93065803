#include "types.h"

#include <sstream>

namespace kerashvd {

const std::vector<DataTypeInfo>& DataTypes() {
  // In enum order (FindDataType relies on it).
  static const std::vector<DataTypeInfo> table = {
      {DataType::kUint8, "uint8", 1, true},
      {DataType::kInt8, "int8", 1, true},
      // Neither MPI nor NCCL reduces 16-bit integers everywhere; Horovod refuses them too.
      {DataType::kUint16, "uint16", 2, false},
      {DataType::kInt16, "int16", 2, false},
      {DataType::kInt32, "int32", 4, true},
      {DataType::kInt64, "int64", 8, true},
      {DataType::kFloat16, "float16", 2, true},
      {DataType::kBfloat16, "bfloat16", 2, true},
      {DataType::kFloat32, "float32", 4, true},
      {DataType::kFloat64, "float64", 8, true},
      {DataType::kBool, "bool", 1, false},
  };
  return table;
}

const std::vector<ReduceOpInfo>& ReduceOps() {
  static const std::vector<ReduceOpInfo> table = {
      {static_cast<int>(ReduceOp::kAverage), "Average", true, true},
      {static_cast<int>(ReduceOp::kSum), "Sum", true, true},
      {static_cast<int>(ReduceOp::kMin), "Min", true, false},
      {static_cast<int>(ReduceOp::kMax), "Max", true, false},
      {static_cast<int>(ReduceOp::kProduct), "Product", true, false},
      {kAdasum, "Adasum", false, false},
  };
  return table;
}

const ReduceOpInfo* FindReduceOp(int value) {
  for (const ReduceOpInfo& row : ReduceOps())
    if (row.value == value) return &row;
  return nullptr;
}

const std::vector<OpTypeInfo>& OpTypes() {
  static const std::vector<OpTypeInfo> table = {
      {OpType::kAllreduce, "allreduce", true},
      {OpType::kAllgather, "allgather", true},
      {OpType::kBroadcast, "broadcast", true},
      {OpType::kAlltoall, "alltoall", true},
      {OpType::kReducescatter, "reducescatter", true},
      {OpType::kBarrier, "barrier", false},
      {OpType::kJoin, "join", false},
  };
  return table;
}

namespace {

// Rows are in enum order, so this is an index (DataTypeSize is on the per-tensor path).
const DataTypeInfo* FindDataType(DataType dtype) {
  const std::vector<DataTypeInfo>& table = DataTypes();
  const size_t i = static_cast<size_t>(dtype);
  return i < table.size() && table[i].dtype == dtype ? &table[i] : nullptr;
}

}  // namespace

size_t DataTypeSize(DataType dtype) {
  const DataTypeInfo* row = FindDataType(dtype);
  return row ? row->size : 0;
}

const char* DataTypeName(DataType dtype) {
  const DataTypeInfo* row = FindDataType(dtype);
  return row ? row->name : "unknown";
}

bool IsReducible(DataType dtype) {
  const DataTypeInfo* row = FindDataType(dtype);
  return row && row->reducible;
}

const char* ReduceOpName(ReduceOp op) {
  const ReduceOpInfo* row = FindReduceOp(static_cast<int>(op));
  return row ? row->name : "unknown";
}

std::string ReduceOpNames(bool scatter_only) {
  std::string out;
  for (const ReduceOpInfo& row : ReduceOps()) {
    if (!row.implemented || (scatter_only && !row.scatter)) continue;
    out += (out.empty() ? "" : ", ") + std::string(row.name);
  }
  return out;
}

const OpTypeInfo* FindOpType(int value) {
  for (const OpTypeInfo& row : OpTypes())
    if (static_cast<int>(row.op) == value) return &row;
  return nullptr;
}

const char* OpTypeName(OpType op) {
  const OpTypeInfo* row = FindOpType(static_cast<int>(op));
  return row ? row->name : "unknown";
}

std::string ReportableOpTypeNames() {
  std::string out;
  for (const OpTypeInfo& row : OpTypes())
    if (row.reportable) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

bool IsHalf(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBfloat16;
}

DataType WireType(DataType dtype, ReduceOp op) {
  const bool extreme = op == ReduceOp::kMin || op == ReduceOp::kMax;
  return IsHalf(dtype) && extreme ? DataType::kFloat32 : dtype;
}

bool IsFloating(DataType dtype) {
  return IsHalf(dtype) || dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t RowElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string ShapeString(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

}  // namespace kerashvd
