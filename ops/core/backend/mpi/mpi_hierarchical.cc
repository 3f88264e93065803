#include "mpi_hierarchical.h"

#include <cstring>
#include <sstream>

#include "mpi_backend.h"
#include "mpi_reduce_ops.h"

namespace kerashvd {
namespace {

// Smallest allreduce that kAuto runs node by node (see HierarchyPlan). Below it the three
// steps cost more latency than the network time they save: measured with raw MPI at 2 nodes
// x 2 ranks over TCP, 4 KiB took 0.06-0.08 ms flat and 0.13-0.16 ms in steps (links
// unlimited, 10 and 1 Gbit/s alike), while 1 MiB and more were as fast or faster in steps.
constexpr int64_t kAutoAllreduceMinBytes = int64_t{64} << 10;

std::string RanksPerNode(const MpiNodes& nodes) {
  std::ostringstream text;
  for (int k = 0; k < nodes.num_nodes(); ++k)
    text << (k ? ", " : "") << nodes.node_ranks(k).size();
  return text.str();
}

}  // namespace

HierarchyPlan PlanHierarchy(const Config& config, const MpiContext& mpi) {
  HierarchyPlan plan;
  const MpiNodes* nodes = mpi.nodes();
  if (!nodes) return plan;  // one node, or one rank per node: the flat algorithm is the same
  if (config.hierarchical_allreduce != Hierarchical::kOff) {
    plan.allreduce = nodes->homogeneous();
    if (config.hierarchical_allreduce == Hierarchical::kAuto)
      plan.allreduce_min_bytes = kAutoAllreduceMinBytes;
    else if (!nodes->homogeneous())
      plan.note = "hierarchical allreduce was asked for, but the nodes run different numbers "
                  "of ranks (" + RanksPerNode(*nodes) + "), so the buffer cannot be split "
                  "alike on every node: allreduce runs flat (one level) on these ranks";
  }
  plan.allgather = config.hierarchical_allgather != Hierarchical::kOff;
  return plan;
}

Status MpiBackend::HierarchicalAllreduce(const void* send, void* recv, int64_t count,
                                         DataType dtype, const ReduceOptions& options) {
  const MpiNodes& nodes = *mpi_->nodes();
  const int size = nodes.local_size(), me = nodes.local_rank();
  const MPI_Datatype type = MpiDatatype(dtype);
  const MPI_Op op = MpiOp(options.op, dtype);
  const int64_t width = DataTypeSize(dtype);
  std::vector<MPI_Count> shard(size), mine_counts(size);
  std::vector<MPI_Aint> at(size, 0), mine_at(size);
  for (int j = 0; j < size; ++j) {
    shard[j] = count / size + (j < count % size ? 1 : 0);
    if (j > 0) at[j] = at[j - 1] + shard[j - 1];
  }
  const MPI_Count n = shard[me];
  for (int j = 0; j < size; ++j) {
    mine_counts[j] = n;
    mine_at[j] = j * n;
  }
  char* copies = static_cast<char*>(scratch_.Reserve(std::max<int64_t>(1, size * n * width)));
  if (!copies)
    return Status::Internal("cannot allocate " + std::to_string(size * n * width) +
                            " bytes for a hierarchical allreduce");
  char* mine = static_cast<char*>(recv) + at[me] * width;
  MPI_Request request;
  // 1. Every local rank's copy of shard `me`, in local-rank order.
  KERASHVD_RETURN_IF_ERROR(Finish(MPI_Ialltoallv_c(send, shard.data(), at.data(), type, copies,
                                                   mine_counts.data(), mine_at.data(), type,
                                                   nodes.local(), &request),
                                  &request, "MPI_Ialltoallv (hierarchical allreduce)"));
  // 2. Reduced in that order; `send` has been read, so writing `recv` is safe in place too.
  if (n > 0) {
    std::memcpy(mine, copies, n * width);
    for (int j = 1; j < size; ++j)
      KERASHVD_RETURN_IF_ERROR(MpiStatus(
          MPI_Reduce_local_c(copies + j * n * width, mine, n, type, op), "MPI_Reduce_local"));
  }
  // 3. Across nodes.
  KERASHVD_RETURN_IF_ERROR(Finish(MPI_Iallreduce_c(MPI_IN_PLACE, mine, n, type, op,
                                                   nodes.cross(), &request),
                                  &request, "MPI_Iallreduce (hierarchical allreduce)"));
  // 4. Every shard to every local rank.
  return Finish(MPI_Iallgatherv_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, shard.data(),
                                  at.data(), type, nodes.local(), &request),
                &request, "MPI_Iallgatherv (hierarchical allreduce)");
}

Status MpiBackend::HierarchicalAllgatherv(const void* send, void* recv,
                                          const std::vector<int64_t>& recv_bytes) {
  const MpiNodes& nodes = *mpi_->nodes();
  const int size = mpi_->size();
  std::vector<int64_t> offset(size + 1, 0);  // of each rank's piece in `recv`
  for (int r = 0; r < size; ++r) offset[r + 1] = offset[r] + recv_bytes[r];
  const int64_t total = offset[size];
  if (total == 0) return Status::Ok();
  char* out = static_cast<char*>(recv);
  const bool leader = nodes.local_rank() == 0;
  const bool blocks = nodes.blocks();
  // Where each node's pieces start in the buffer the leaders exchange: `recv` itself when rank
  // order is node order, else a staging buffer in node order.
  const int num_nodes = nodes.num_nodes();
  std::vector<MPI_Count> node_bytes(num_nodes, 0);
  std::vector<MPI_Aint> node_at(num_nodes, 0);
  for (int k = 0; k < num_nodes; ++k) {
    for (int r : nodes.node_ranks(k)) node_bytes[k] += recv_bytes[r];
    node_at[k] = blocks ? offset[nodes.node_ranks(k)[0]]
                        : (k ? node_at[k - 1] + node_bytes[k - 1] : 0);
  }
  char* base = out;
  if (!blocks && leader) {
    base = static_cast<char*>(scratch_.Reserve(total));
    if (!base)
      return Status::Internal("cannot allocate " + std::to_string(total) +
                              " bytes for a hierarchical allgather");
  }
  const std::vector<int>& local = nodes.node_ranks(nodes.node());
  std::vector<MPI_Count> counts(local.size());
  std::vector<MPI_Aint> displs(local.size());
  MPI_Aint next = node_at[nodes.node()];
  for (size_t i = 0; i < local.size(); ++i) {
    counts[i] = recv_bytes[local[i]];
    displs[i] = next;
    next += counts[i];
  }
  MPI_Request request;
  // 1. The node's pieces to its leader.
  KERASHVD_RETURN_IF_ERROR(Finish(MPI_Igatherv_c(send, recv_bytes[mpi_->rank()], MPI_BYTE, base,
                                                 counts.data(), displs.data(), MPI_BYTE, 0,
                                                 nodes.local(), &request),
                                  &request, "MPI_Igatherv (hierarchical allgather)"));
  if (leader) {
    // 2. The nodes' pieces among the leaders, then (staging) each piece to its place.
    KERASHVD_RETURN_IF_ERROR(Finish(MPI_Iallgatherv_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base,
                                                      node_bytes.data(), node_at.data(),
                                                      MPI_BYTE, nodes.cross(), &request),
                                    &request, "MPI_Iallgatherv (hierarchical allgather)"));
    if (!blocks)
      for (int k = 0; k < num_nodes; ++k) {
        int64_t at = node_at[k];
        for (int r : nodes.node_ranks(k)) {
          if (recv_bytes[r] > 0) std::memcpy(out + offset[r], base + at, recv_bytes[r]);
          at += recv_bytes[r];
        }
      }
  }
  // 3. The whole result to the node.
  return Finish(MPI_Ibcast_c(out, total, MPI_BYTE, 0, nodes.local(), &request), &request,
                "MPI_Ibcast (hierarchical allgather)");
}

}  // namespace kerashvd
