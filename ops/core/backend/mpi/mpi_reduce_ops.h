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
// Min and Max reach MPI as float32). They travel as MPI_UINT16_T under user-defined operations
// that compute with ReduceHalves (half_reduce.h: vectorized, canonical NaN, commutative on
// bits). MPICH 5.0.2 has float16 and bfloat16 types of its own (MPIX_C_FLOAT16,
// MPIX_BFLOAT16), but its float16 arithmetic is slow: an allreduce of 4 Mi float16 values on 2
// ranks of one host took 61 ms against 16 ms for 4 Mi float32 values. A user-defined operation
// makes MPICH run recursive doubling, which `auto` hierarchical allreduce knows (link_model.h).
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
