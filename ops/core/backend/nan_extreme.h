// The host backends' Min and Max of two floating-point values, numpy's rule:
//   - NaN if either value is NaN, always the canonical quiet NaN (so payloads cannot differ);
//   - for Max, +0.0 over -0.0; for Min, -0.0 over +0.0 (IEEE 754-2019 maximum/minimum);
//   - otherwise the larger (smaller) value.
// It depends only on the pair of values, not on their order, so every rank gets the same bits
// whatever order an algorithm combines them in. Used by the MPI backend's user-defined
// operations (mpi/mpi_reduce_ops.h) and by the shared-memory pair (shm/pair_reduce.h).
#pragma once

#include <cmath>
#include <limits>

namespace kerashvd {

template <typename T, bool kMax>
inline T NanExtreme(T x, T y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<T>::quiet_NaN();
  if (x == y) return std::signbit(x) == kMax ? y : x;  // equal, or +0.0 and -0.0
  return (x > y) == kMax ? x : y;
}

}  // namespace kerashvd
