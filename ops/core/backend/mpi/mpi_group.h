// MpiGroup: Group (../../group.h) on an MPI communicator, with the peer timeout and the
// engine's abort flag on every wait (mpi_wait.h).
#pragma once

#include <mpi.h>

#include "../../abort_flag.h"
#include "../../group.h"
#include "mpi_context.h"

namespace kerashvd {

class MpiGroup : public Group {
 public:
  // Takes over `comm` and frees it, unless Release() handed it on.
  MpiGroup(MPI_Comm comm, double timeout_seconds, const AbortFlag* abort);
  ~MpiGroup() override;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Allgather(const std::vector<uint64_t>& words, const char* what,
                   std::vector<uint64_t>* all) override;
  Status Split(int color, std::unique_ptr<Group>* out) override;
  // Hands the communicator to the caller, who frees it from now on.
  MPI_Comm Release();

  // A group on a duplicate of `of`'s communicator (the process-set registry's own).
  static Status Duplicate(const MpiContext& of, double timeout_seconds, const AbortFlag* abort,
                          std::unique_ptr<Group>* out);
  // Turns a group made by Split into the context a lane runs on; with `gpu` non-null, first a
  // duplicate of it for the set's GPU collectives (collective over the group, like Split).
  static Status ToContexts(std::unique_ptr<Group> group, std::unique_ptr<MpiContext>* comm,
                           std::unique_ptr<MpiContext>* gpu);

 private:
  MPI_Comm comm_;
  double timeout_seconds_;
  const AbortFlag* abort_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace kerashvd
