// MpiBackend: the data plane on host memory through MPI's large-count (_c) collectives.
#pragma once

#include "../backend.h"
#include "mpi_context.h"

namespace kerashvd {

class MpiBackend : public Backend {
 public:
  explicit MpiBackend(const MpiContext* mpi) : mpi_(mpi) {}
  const char* name() const override { return "MPI"; }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                   const ReduceOptions& options) override;
  Status Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) override;
  Status Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, const ReduceOptions& options) override;
  Status AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) override;
  Status AlltoallInt64(const int64_t* send, int64_t* recv) override;

 private:
  const MpiContext* mpi_;
};

}  // namespace kerashvd
