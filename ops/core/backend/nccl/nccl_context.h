// NcclContext: one NCCL communicator over the engine's ranks, bound to one GPU, with the CUDA
// stream and event its collectives run on.
//
// Creation is collective: every rank calls Create at the same point of its program (in the
// engine, the background thread, which meets the other ranks in the same order every cycle).
// Rank 0 makes an ncclUniqueId and broadcasts it over the engine's own MPI communicator
// (MpiContext::comm()), so NCCL's bootstrap never touches MPI_COMM_WORLD or user traffic;
// then every rank calls ncclCommInitRank on its device.
//
// Completion: Wait() records the event on the stream and polls it, checking
// ncclCommGetAsyncError and the engine's abort flag between polls. An asynchronous NCCL error
// (a peer died, a network failure), the abort flag (the engine's peer monitor saw a rank die
// or freeze) or an elapsed timeout aborts the communicator (ncclCommAbort), which makes the
// stuck kernels exit instead of hanging the process; every later call then fails at once.
//
// Not thread-safe: one thread (the engine's background thread) uses a context at a time.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "../../abort_flag.h"
#include "../../status.h"
#include "../mpi/mpi_context.h"

namespace kerashvd {

// The one conversion of an ncclResult_t to a Status: Internal, naming the call, with
// ncclGetErrorString and NCCL's last error message.
Status NcclStatus(ncclResult_t result, const char* call);
// The same for a CUDA runtime call.
Status CudaStatus(cudaError_t error, const char* call);

class NcclContext {
 public:
  // Collective over `mpi`'s ranks. `device` is this rank's CUDA device ordinal (the engine
  // uses its tensors' device; -1 picks local_rank % the visible device count). A positive
  // `timeout_seconds` bounds every Wait(); 0 waits for as long as the collective takes.
  // `abort` (optional; must outlive the context) ends any Wait() once it is set.
  static Status Create(const MpiContext& mpi, int device, double timeout_seconds,
                       std::unique_ptr<NcclContext>* out, const AbortFlag* abort = nullptr);
  ~NcclContext();
  NcclContext(const NcclContext&) = delete;
  NcclContext& operator=(const NcclContext&) = delete;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Makes this context's device current on the calling thread and fails if the communicator
  // was aborted by an earlier error. Call before enqueueing work.
  Status Begin(const char* what);
  // Blocks until everything enqueued on stream() has finished (see the file comment).
  Status Wait(const char* what);

 private:
  NcclContext() = default;
  Status Abort(Status reason);

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  double timeout_seconds_ = 0;
  const AbortFlag* abort_ = nullptr;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace kerashvd
