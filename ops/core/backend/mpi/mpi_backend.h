// MpiBackend: the data plane on host memory through MPI's large-count (_c) collectives.
// Each collective is started non-blocking and completed by spinning on MPI_Test (as a
// blocking call would), checking the AbortFlag so a peer's death ends the wait. Allreduce and
// allgather go node by node where the HierarchyPlan says so (mpi_hierarchical.h).
#pragma once

#include "../../fusion.h"
#include "../../huge_pages.h"
#include "../backend.h"
#include "../../abort_flag.h"
#include "../shm/pair_reduce.h"
#include "../shm/shm_pair.h"
#include "mpi_context.h"
#include "mpi_hierarchical.h"

namespace kerashvd {

class MpiBackend : public Backend {
 public:
  // `huge_pages` (optional) is told about large buffers before MPI streams through them.
  // `hierarchy`: PlanHierarchy's answer for `mpi` (default: everything flat). `pair`
  // (optional, MakeShmPair): runs the allreduces it can reduce, in place of MPI.
  MpiBackend(const MpiContext* mpi, const AbortFlag* abort, HugePages* huge_pages = nullptr,
             HierarchyPlan hierarchy = {}, std::unique_ptr<ShmPair> pair = nullptr)
      : mpi_(mpi), abort_(abort), huge_pages_(huge_pages), hierarchy_(std::move(hierarchy)),
        scratch_(huge_pages && huge_pages->enabled()), pair_(std::move(pair)) {}
  const char* name() const override { return "MPI"; }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                   const ReduceOptions& options) override;
  // Through the shared-memory pair, and on a communicator of one rank, where the result is
  // the input: one scaled copy per span instead of two passes through the fusion buffer.
  bool ReducesSpans(DataType dtype, ReduceOp op) const override {
    return mpi_->size() == 1 || (pair_ && PairReducible(dtype, op));
  }
  Status AllreduceSpans(const std::vector<AllreduceSpan>& spans, DataType dtype,
                        const ReduceOptions& options) override;
  // Smallest allreduce (bytes) that SplitAllreduce takes on 2 ranks when one is out of place.
  static constexpr int64_t kSplitMinBytes = int64_t{1} << 20;
  Status Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) override;
  Status Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, const ReduceOptions& options) override;
  Status AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) override;
  Status AlltoallInt64(const int64_t* send, int64_t* recv) override;

 private:
  Status SplitAllreduce(const void* send, void* recv, int64_t count, DataType dtype,
                        const ReduceOptions& options);
  // Node by node (mpi_hierarchical.cc); only where hierarchy_ says so.
  Status HierarchicalAllreduce(const void* send, void* recv, int64_t count, DataType dtype,
                               const ReduceOptions& options);
  Status ReduceScatterInOrder(const void* send, const std::vector<MPI_Count>& counts,
                              const std::vector<MPI_Aint>& at, int me, MPI_Comm comm,
                              MPI_Datatype type, MPI_Op op, int64_t width, char* out,
                              const std::string& what);
  Status HierarchicalAllgatherv(const void* send, void* recv,
                                const std::vector<int64_t>& recv_bytes);
  Status Finish(int rc, MPI_Request* request, const char* what);
  const MpiContext* mpi_;
  const AbortFlag* abort_;
  HugePages* huge_pages_;
  const HierarchyPlan hierarchy_;
  FusionBuffer scratch_;  // the hierarchical collectives' staging memory
  std::unique_ptr<ShmPair> pair_;
};

// The pair of a communicator of exactly two ranks on one host (collective over `mpi`), or
// null: elsewhere, when `enabled` is false, or when the segment cannot be made on either rank
// (both ranks then get null and keep to MPI). `abort` ends the pair's waits.
std::unique_ptr<ShmPair> MakeShmPair(const MpiContext* mpi, const AbortFlag* abort, bool enabled);

}  // namespace kerashvd
