// MpiGroup: Group (../../group.h) on an MPI communicator (an MpiContext, which knows the
// communicator's node layout), with the peer timeout and the engine's abort flag on every
// wait (mpi_wait.h). Groups split or duplicated from it inherit both.
#pragma once

#include "../../abort_flag.h"
#include "../../group.h"
#include "mpi_context.h"

namespace kerashvd {

class MpiGroup : public Group {
 public:
  MpiGroup(std::unique_ptr<MpiContext> context, double timeout_seconds, const AbortFlag* abort);
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int rank() const override { return context_->rank(); }
  int size() const override { return context_->size(); }
  Topology topology() const override { return context_->topology(); }
  Status Allgather(const std::vector<uint64_t>& words, const char* what,
                   std::vector<uint64_t>* all) override;
  Status Split(int color, std::unique_ptr<Group>* out) override;
  Status Duplicate(std::unique_ptr<Group>* out) override;
  LaneTransport MakeLaneTransport(const Config& config, const std::string& label,
                                  int world_rank0) override;
  Status CreateGpuPlane(Timeline* timeline, int device, double timeout_seconds,
                        std::unique_ptr<GpuPlane>* out) override;
  void MarkBroken() override { MarkMpiBroken(); }

 private:
  // A group of the same kind over `comm` (taken over; null gives a null group).
  Status Adopt(MPI_Comm comm, std::unique_ptr<Group>* out) const;

  std::unique_ptr<MpiContext> context_;
  double timeout_seconds_;
  const AbortFlag* abort_;
};

}  // namespace kerashvd
