// MakeShmPair (mpi_backend.h): rank 0 of the pair creates the segment and sends its name; rank
// 1 opens it; both learn whether both succeeded, and rank 0 then removes the name.
#include <cstring>

#include "mpi_backend.h"

namespace kerashvd {

std::unique_ptr<ShmPair> MakeShmPair(const MpiContext* mpi, const AbortFlag* abort, bool enabled) {
  // local_size() is the same on both ranks, so both decide alike.
  if (!enabled || mpi->size() != 2 || mpi->local_size() != 2) return nullptr;
  std::unique_ptr<ShmSegment> segment;
  char name[128] = {0};  // empty: rank 0 has no segment
  if (mpi->rank() == 0 && ShmSegment::Create(ShmPair::kSegmentBytes, &segment).ok())
    std::strncpy(name, segment->name().c_str(), sizeof(name) - 1);
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, mpi->comm());
  if (mpi->rank() == 1 && name[0] != 0)
    if (!ShmSegment::Open(name, ShmPair::kSegmentBytes, &segment).ok()) segment.reset();
  int mine = segment ? 1 : 0, both = 0;
  MPI_Allreduce(&mine, &both, 1, MPI_INT, MPI_LAND, mpi->comm());
  if (segment) segment->Unlink();
  if (!both) return nullptr;
  return std::make_unique<ShmPair>(std::move(segment), mpi->rank(), abort);
}

}  // namespace kerashvd
