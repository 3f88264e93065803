// The element-wise reductions of the shared-memory pair (shm_pair.h): out[i] = a[i] op b[i],
// each result also written to a second place (the peer's copy), in one pass.
//
// The values are those of the MPI backend for one pair of operands (mpi_reduce_ops.h):
// integers wrap on overflow (Sum, Product); float Min and Max follow numpy's NaN rule (NaN if
// either operand is NaN, always the canonical quiet NaN; -0.0 below +0.0); float16/bfloat16
// are summed and multiplied as ReduceHalves does (half_reduce.h). Every op here is
// commutative on bits (a op b == b op a), which is why the two ranks of a pair may combine
// their operands in either order and still agree.
#pragma once

#include <cstdint>

#include "../../types.h"

namespace kerashvd {

// Whether PairReduce handles `dtype` with `op`: Sum, Min, Max or Product of a natively
// reducible type (IsReducible); of float16/bfloat16 Sum and Product (half_reduce.h), whose Min
// and Max the engine takes in float32.
bool PairReducible(DataType dtype, ReduceOp op);

// out[i] = copy[i] = ScaleOne(a[i] op b[i], factor) for i < count (buffer_ops.h; a factor of
// 1 leaves the values as they are). `out` may be `a` or `b`; `copy` overlaps none, or is null
// (only with a factor of 1) when no second copy is wanted.
void PairReduce(const void* a, const void* b, void* out, void* copy, int64_t count,
                DataType dtype, ReduceOp op, double factor = 1.0);

}  // namespace kerashvd
