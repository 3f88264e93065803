// The MPI datatype and MPI_Op of each reduction, per dtype.
//
// Min and Max of float32 and float64 do not use MPI_MIN/MPI_MAX: MPICH computes them with a
// plain comparison, which returns whichever operand comes second when one is NaN, so the
// result depended on the order in which the ranks' values were combined, and that order
// differs between ranks (rank 0 got 5.0 where rank 1 got NaN). The user-defined operations
// here give every element a value that depends only on the set of the ranks' values:
//   - NaN if any rank's value is NaN (as numpy's np.maximum/np.minimum), always the canonical
//     quiet NaN, so that NaN payloads cannot differ either;
//   - for Max, +0.0 over -0.0; for Min, -0.0 over +0.0 (IEEE 754-2019 maximum/minimum);
//   - otherwise the largest (smallest) value.
// Being commutative and associative on bits, they give every rank the same bits whatever the
// algorithm. Integer types use MPI_MIN/MPI_MAX, which are exact.
//
// float16 and bfloat16 are summed and multiplied in their own type (WireType in types.h; their
// Min and Max reach MPI as float32). Where the MPI library reduces them itself (MPICH's
// MPIX_C_FLOAT16 and MPIX_BFLOAT16 with MPI_SUM and MPI_PROD, checked once with
// MPI_Reduce_local), they use its types and operations, so MPI picks the same algorithms as
// for float32 (a user-defined operation would make MPICH fall back to recursive doubling).
// Elsewhere they travel as MPI_UINT16_T under user-defined operations (ReduceHalves in
// buffer_ops.h: float32 arithmetic, rounded to nearest even; commutative on bits).
#pragma once

#include <mpi.h>

#include "../../types.h"

namespace kerashvd {

// Valid once MPI is initialized; the user-defined operations are created on first use.
MPI_Op MpiOp(ReduceOp op, DataType dtype);
// The MPI datatype of float16/bfloat16 elements in a reduction (see above).
MPI_Datatype MpiHalfType(DataType dtype);
// Whether the MPI library reduces float16 and bfloat16 itself (see above).
bool MpiReducesHalves();
// Whether `op` is one of MPI's own (MPI_SUM, ...), not one created here: MPI may pick its
// allreduce algorithm by it (MPICH runs recursive doubling for user-defined operations).
bool IsPredefinedOp(MPI_Op op);

}  // namespace kerashvd
