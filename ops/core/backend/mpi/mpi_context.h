// MpiContext: MPI initialization and the engine's own communicators.
//
// kerashvd initializes MPI only when nobody else has (mpi4py may have, or may do so later and
// find it initialized), asks for MPI_THREAD_MULTIPLE so user code may call MPI beside the
// engine's thread, and works on a duplicate of MPI_COMM_WORLD so user traffic never mixes
// with ours. MPI is finalized once, at process exit, and only if kerashvd initialized it, so
// init() after shutdown() works.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "../../status.h"
#include "../../topology.h"
#include "../../types.h"
#include "mpi_nodes.h"

namespace kerashvd {

class MpiContext {
 public:
  static Status Create(std::unique_ptr<MpiContext>* out);
  // A context for `comm` (a process set's communicator), which it takes over and frees.
  static Status FromComm(MPI_Comm comm, std::unique_ptr<MpiContext>* out);
  ~MpiContext();

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  // Whether every host runs the same number of ranks (the same answer on every rank).
  bool homogeneous() const { return homogeneous_; }
  bool threads_supported() const { return thread_level_ == MPI_THREAD_MULTIPLE; }
  // All of the above as one value, for the bindings (topology.h).
  Topology topology() const;
  // The ranks grouped by node, with their communicators; null on one node. Used by this
  // context's lane only (hierarchical collectives).
  const MpiNodes* nodes() const { return nodes_.get(); }
  // The node (0, 1, ... in the order of their lowest rank) of each rank of comm().
  const std::vector<int>& node_of() const { return node_of_; }

 private:
  MpiContext() = default;
  // Fills rank, size and the local/cross topology from comm_ (collective over comm_).
  Status Describe();
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  int thread_level_ = MPI_THREAD_SINGLE;
  bool homogeneous_ = true;
  std::unique_ptr<MpiNodes> nodes_;
  std::vector<int> node_of_;
};

// After a peer failure MPI cannot be used again in this process: no finalize at exit (it would
// wait for the dead rank), no new engine.
void MarkMpiBroken();
bool MpiBroken();

// Turns an MPI error code into a Status naming the call.
Status MpiStatus(int code, const char* call);
// The MPI datatype that reduces `dtype` (with MpiOp's operation for it, mpi_reduce_ops.h), or
// MPI_DATATYPE_NULL for a dtype MPI cannot reduce.
MPI_Datatype MpiDatatype(DataType dtype);

}  // namespace kerashvd
