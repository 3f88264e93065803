#include "mpi_reduce_ops.h"

#include <mutex>

#include "../nan_extreme.h"

namespace kerashvd {
namespace {

template <typename T, bool kMax>
void Reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = NanExtreme<T, kMax>(a[i], b[i]);
}

struct FloatOps {
  MPI_Op min32, max32, min64, max64;
};

const FloatOps& Ops() {
  static std::once_flag once;
  static FloatOps ops;
  std::call_once(once, [] {
    MPI_Op_create(&Reduce<float, false>, /*commute=*/1, &ops.min32);
    MPI_Op_create(&Reduce<float, true>, 1, &ops.max32);
    MPI_Op_create(&Reduce<double, false>, 1, &ops.min64);
    MPI_Op_create(&Reduce<double, true>, 1, &ops.max64);
  });
  return ops;
}

}  // namespace

MPI_Op MpiOp(ReduceOp op, DataType dtype) {
  const bool is_float = dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
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
