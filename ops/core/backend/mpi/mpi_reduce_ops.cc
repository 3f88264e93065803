#include "mpi_reduce_ops.h"

#include <cstdint>
#include <mutex>

#include "../../buffer_ops.h"
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

// 1 + 1 == 2 in the library's own half types, with errors returned rather than fatal (a library
// that declares the types but was built without their arithmetic fails the call).
bool ProbeNativeHalves() {
#if defined(MPIX_C_FLOAT16) && defined(MPIX_BFLOAT16)
  MPI_Errhandler world, self;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  uint16_t fp16[2] = {0x3C00, 0x3C00}, bf16[2] = {0x3F80, 0x3F80};  // 1.0, 1.0
  const bool ok =
      MPI_Reduce_local(&fp16[0], &fp16[1], 1, MPIX_C_FLOAT16, MPI_SUM) == MPI_SUCCESS &&
      MPI_Reduce_local(&bf16[0], &bf16[1], 1, MPIX_BFLOAT16, MPI_SUM) == MPI_SUCCESS &&
      fp16[1] == 0x4000 && bf16[1] == 0x4000;  // 2.0
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
  MPI_Errhandler_free(&world);
  MPI_Errhandler_free(&self);
  return ok;
#else
  return false;
#endif
}

}  // namespace

bool MpiReducesHalves() {
  static std::once_flag once;
  static bool native = false;
  std::call_once(once, [] { native = ProbeNativeHalves(); });
  return native;
}

MPI_Datatype MpiHalfType(DataType dtype) {
#if defined(MPIX_C_FLOAT16) && defined(MPIX_BFLOAT16)
  if (MpiReducesHalves()) return dtype == DataType::kBfloat16 ? MPIX_BFLOAT16 : MPIX_C_FLOAT16;
#else
  (void)dtype;
#endif
  return MPI_UINT16_T;
}

MPI_Op MpiOp(ReduceOp op, DataType dtype) {
  const bool is_float = dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
  if (IsHalf(dtype)) {
    // Min and Max of halves travel as float32 (WireType): MPI_OP_NULL makes MPI refuse them.
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) return MPI_OP_NULL;
    const bool bf16 = dtype == DataType::kBfloat16, product = op == ReduceOp::kProduct;
    if (MpiReducesHalves()) return product ? MPI_PROD : MPI_SUM;
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
