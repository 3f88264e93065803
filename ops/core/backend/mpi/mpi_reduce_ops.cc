#include "mpi_reduce_ops.h"

#include <cstdint>
#include <mutex>

#include "../../half_reduce.h"
#include "../nan_extreme.h"

namespace kerashvd {
namespace {

template <typename T, bool kMax>
void Reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = NanExtreme<T, kMax>(a[i], b[i]);
}

template <DataType kType, ReduceOp kOp>
void ReduceHalf(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceHalves(in, inout, *len, kType, kOp);
}

struct UserOps {
  MPI_Op min32, max32, min64, max64;
  MPI_Op sum16, prod16, sum_bf16, prod_bf16;
};

const UserOps& Ops() {
  static std::once_flag once;
  static UserOps ops;
  std::call_once(once, [] {
    MPI_Op_create(&Reduce<float, false>, /*commute=*/1, &ops.min32);
    MPI_Op_create(&Reduce<float, true>, 1, &ops.max32);
    MPI_Op_create(&Reduce<double, false>, 1, &ops.min64);
    MPI_Op_create(&Reduce<double, true>, 1, &ops.max64);
    MPI_Op_create(&ReduceHalf<DataType::kFloat16, ReduceOp::kSum>, 1, &ops.sum16);
    MPI_Op_create(&ReduceHalf<DataType::kFloat16, ReduceOp::kProduct>, 1, &ops.prod16);
    MPI_Op_create(&ReduceHalf<DataType::kBfloat16, ReduceOp::kSum>, 1, &ops.sum_bf16);
    MPI_Op_create(&ReduceHalf<DataType::kBfloat16, ReduceOp::kProduct>, 1, &ops.prod_bf16);
  });
  return ops;
}

}  // namespace

MPI_Op MpiOp(ReduceOp op, DataType dtype) {
  const bool is_float = dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
  if (IsHalf(dtype)) {
    // Min and Max of halves travel as float32 (WireType): MPI_OP_NULL makes MPI refuse them.
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) return MPI_OP_NULL;
    const bool bf16 = dtype == DataType::kBfloat16, product = op == ReduceOp::kProduct;
    if (product) return bf16 ? Ops().prod_bf16 : Ops().prod16;
    return bf16 ? Ops().sum_bf16 : Ops().sum16;
  }
  switch (op) {
    case ReduceOp::kMin:
      if (!is_float) return MPI_MIN;
      return dtype == DataType::kFloat32 ? Ops().min32 : Ops().min64;
    case ReduceOp::kMax:
      if (!is_float) return MPI_MAX;
      return dtype == DataType::kFloat32 ? Ops().max32 : Ops().max64;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;
  }
}

bool IsPredefinedOp(MPI_Op op) {
  return op == MPI_SUM || op == MPI_PROD || op == MPI_MIN || op == MPI_MAX;
}

}  // namespace kerashvd
