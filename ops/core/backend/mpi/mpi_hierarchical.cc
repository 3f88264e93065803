#include "mpi_hierarchical.h"

#include <algorithm>
#include <cstring>

#include "mpi_algorithm.h"
#include "mpi_backend.h"
#include "mpi_reduce_ops.h"

namespace kerashvd {
namespace {

const char* ModeName(int mode) {
  switch (static_cast<Hierarchical>(mode)) {
    case Hierarchical::kOn: return "on";
    case Hierarchical::kOff: return "off";
    default: return "auto";
  }
}

// `count` elements cut into `parts` pieces, the first count % parts one longer: each piece's
// length and offset.
void Split(int64_t count, int parts, std::vector<MPI_Count>* lengths, std::vector<MPI_Aint>* at) {
  lengths->assign(parts, 0);
  at->assign(parts + 1, 0);
  for (int j = 0; j < parts; ++j) {
    (*lengths)[j] = count / parts + (j < count % parts ? 1 : 0);
    (*at)[j + 1] = (*at)[j] + (*lengths)[j];
  }
}

}  // namespace

HierarchyPlan PlanHierarchy(const Config& config, const MpiContext& mpi) {
  HierarchyPlan plan;
  const MpiNodes* nodes = mpi.nodes();
  if (!nodes) return plan;  // one node: the flat algorithm is all there is
  const MpiAllreduceSetting setting = ReadMpiAllreduceSetting();
  // Rank 0's settings and MPI algorithm, so that every rank decides alike.
  const int mine[4] = {static_cast<int>(config.hierarchical_allreduce),
                       static_cast<int>(config.hierarchical_allgather),
                       static_cast<int>(setting.algorithm), setting.tree_k};
  int agreed[4] = {mine[0], mine[1], mine[2], mine[3]};
  if (MPI_Bcast(agreed, 4, MPI_INT, 0, mpi.comm()) != MPI_SUCCESS) {
    plan.note = "could not agree on the hierarchical settings with rank 0: everything flat";
    return plan;
  }
  if (mine[0] != agreed[0] || mine[1] != agreed[1])
    plan.note = std::string("hierarchical_allreduce/_allgather are ") + ModeName(mine[0]) +
                "/" + ModeName(mine[1]) + " on this rank but " + ModeName(agreed[0]) + "/" +
                ModeName(agreed[1]) + " on rank 0: every rank follows rank 0. Set them alike "
                "on every rank";
  else if (mine[2] != agreed[2] || mine[3] != agreed[3])
    plan.note = std::string("MPI's allreduce algorithm reads as ") +
                FlatAlgorithmName(setting.algorithm) + " on this rank but otherwise on rank 0 "
                "(MPIR_CVAR_IALLREDUCE_* differ between ranks): kerashvd follows rank 0's";
  LinkModelInputs inputs;
  inputs.mode = static_cast<Hierarchical>(agreed[0]);
  inputs.algorithm = static_cast<FlatAlgorithm>(agreed[2]);
  inputs.tree_k = agreed[3];
  inputs.node_of = mpi.node_of();
  if (inputs.mode != Hierarchical::kOff) plan.allreduce.emplace(std::move(inputs));
  // Allgather node by node only gains where a node runs several ranks.
  plan.allgather = static_cast<Hierarchical>(agreed[1]) != Hierarchical::kOff &&
                   nodes->largest_node() >= 2;
  return plan;
}

Status MpiBackend::HierarchicalAllreduce(const void* send, void* recv, int64_t count,
                                         DataType dtype, const ReduceOptions& options) {
  const MpiNodes& nodes = *mpi_->nodes();
  const int size = nodes.local_size(), me = nodes.local_rank();
  const MPI_Datatype type = MpiDatatype(dtype);
  const MPI_Op op = MpiOp(options.op, dtype);
  const int64_t width = DataTypeSize(dtype);
  char* out = static_cast<char*>(recv);
  std::vector<MPI_Count> shard;
  std::vector<MPI_Aint> shard_at;
  Split(count, nodes.shards(), &shard, &shard_at);
  // 1. Within the node: local rank i reduces every copy of its shards' elements [at[i],
  // at[i+1]).
  std::vector<MPI_Count> owned(size);
  std::vector<MPI_Aint> at(size + 1);
  for (int i = 0; i <= size; ++i) {
    at[i] = shard_at[i < size ? nodes.ShardsOf(i).first : nodes.shards()];
    if (i > 0) owned[i - 1] = at[i] - at[i - 1];
  }
  if (size == 1) {
    if (send != recv) std::memcpy(recv, send, count * width);
  } else {
    KERASHVD_RETURN_IF_ERROR(ReduceScatterInOrder(send, owned, at, me, nodes.local(), type, op,
                                                  width, out, "hierarchical allreduce"));
  }
  // 2-3. Across the nodes, one shard at a time: block k of the shard is reduced by node k's
  // owner, then the blocks are gathered back.
  const auto [first, last] = nodes.ShardsOf(me);
  MPI_Request request;
  for (int j = first; j < last; ++j) {
    char* mine = out + shard_at[j] * width;
    std::vector<MPI_Count> block;
    std::vector<MPI_Aint> block_at;
    Split(shard[j], nodes.num_nodes(), &block, &block_at);
    KERASHVD_RETURN_IF_ERROR(ReduceScatterInOrder(mine, block, block_at, nodes.node(),
                                                  nodes.shard_comm(j), type, op, width, mine,
                                                  "hierarchical allreduce, across"));
    KERASHVD_RETURN_IF_ERROR(
        Finish(MPI_Iallgatherv_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, mine, block.data(),
                                 block_at.data(), type, nodes.shard_comm(j), &request),
               &request, "MPI_Iallgatherv (hierarchical allreduce, across)"));
  }
  if (size == 1) return Status::Ok();
  // 4. Every shard to every local rank.
  return Finish(MPI_Iallgatherv_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, owned.data(),
                                  at.data(), type, nodes.local(), &request),
                &request, "MPI_Iallgatherv (hierarchical allreduce)");
}

// Member i of `comm` owns the counts[i] elements at at[i] of every member's `send`: an
// alltoall hands this rank (member `me`) every member's copy of its elements, which it
// reduces in member order, ((x0 op x1) op x2) op ..., into the same place of `out`. `send`
// has been read when the alltoall completes, so `out` may be the same buffer.
Status MpiBackend::ReduceScatterInOrder(const void* send, const std::vector<MPI_Count>& counts,
                                        const std::vector<MPI_Aint>& at, int me, MPI_Comm comm,
                                        MPI_Datatype type, MPI_Op op, int64_t width, char* out,
                                        const std::string& what) {
  const int members = static_cast<int>(counts.size());
  const MPI_Count n = counts[me];
  std::vector<MPI_Count> mine_counts(members, n);
  std::vector<MPI_Aint> mine_at(members);
  for (int i = 0; i < members; ++i) mine_at[i] = i * n;
  char* copies = static_cast<char*>(scratch_.Reserve(std::max<int64_t>(1, members * n * width)));
  if (!copies)
    return Status::Internal("cannot allocate " + std::to_string(members * n * width) +
                            " bytes for a " + what);
  const std::string call = "MPI_Ialltoallv (" + what + ")";
  MPI_Request request;
  KERASHVD_RETURN_IF_ERROR(Finish(MPI_Ialltoallv_c(send, counts.data(), at.data(), type, copies,
                                                   mine_counts.data(), mine_at.data(), type,
                                                   comm, &request),
                                  &request, call.c_str()));
  if (n == 0) return Status::Ok();
  char* result = out + at[me] * width;
  std::memcpy(result, copies, n * width);
  for (int i = 1; i < members; ++i)
    KERASHVD_RETURN_IF_ERROR(MpiStatus(
        MPI_Reduce_local_c(copies + i * n * width, result, n, type, op), "MPI_Reduce_local"));
  return Status::Ok();
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
                                                      MPI_BYTE, nodes.shard_comm(0), &request),
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
