// Sum and Product of float16/bfloat16 on the host: the arithmetic of every host reduction of
// halves (the MPI backend's operations for them, the shared-memory pair).
//
// Each element is computed in float32 and rounded to nearest even, which for one addition or
// multiplication of two halves is the correctly rounded half result (float32 has more than
// twice a half's significant bits plus two, so rounding twice cannot differ from rounding
// once). A NaN result is always the canonical quiet NaN (0x7E00, 0x7FC0): the hardware's
// NaN + NaN keeps one operand's payload, which would make a op b differ from b op a, and the
// ranks of an MPI algorithm combine their operands in different orders. So the result is
// commutative on bits, and every rank gets the same bits whatever order the algorithm takes.
//
// Where the CPU has F16C and AVX2 (checked once at run time), eight elements go at a time
// through the vector conversion instructions; elsewhere, one at a time through the same
// arithmetic in plain C++. Both give the same bits (tests/buffer_ops_test.cc).
#pragma once

#include <cstdint>

#include "types.h"

namespace kerashvd {

// inout[i] = in[i] op inout[i] for i < count; `op` is Sum or Product, `dtype` float16 or
// bfloat16.
void ReduceHalves(const void* in, void* inout, int64_t count, DataType dtype, ReduceOp op);

// The same with the vector path off (for the tests that compare the two).
void ReduceHalvesScalar(const void* in, void* inout, int64_t count, DataType dtype, ReduceOp op);
// Whether ReduceHalves takes the vector path on this CPU.
bool HalvesVectorized();

}  // namespace kerashvd
