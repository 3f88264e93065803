// The MPI_Op of each reduction, per dtype.
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
// algorithm. float16/bfloat16 are reduced in float32 (the engine widens them), so they follow
// the same rule. Integer types use MPI_MIN/MPI_MAX, which are exact.
#pragma once

#include <mpi.h>

#include "../../types.h"

namespace kerashvd {

// Valid once MPI is initialized; the user-defined operations are created on first use.
MPI_Op MpiOp(ReduceOp op, DataType dtype);
// Whether `op` is one of MPI's own (MPI_SUM, ...), not one created here: MPI may pick its
// allreduce algorithm by it (MPICH runs recursive doubling for user-defined operations).
bool IsPredefinedOp(MPI_Op op);

}  // namespace kerashvd
