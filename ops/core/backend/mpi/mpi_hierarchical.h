// Hierarchical allreduce and allgather on host memory: the data crosses the network once per
// node instead of once per rank, and everything else moves within nodes over shared memory.
// (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER; here KERASHVD_HIERARCHICAL_*.)
//
// Allreduce of `count` elements on L ranks a node (every node the same L), in four steps:
//   1. The buffer is cut into L shards (the first count % L one element longer); local rank i
//      owns shard i. An alltoall within the node hands each owner every local rank's copy of
//      its shard.
//   2. The owner reduces those copies in local-rank order: ((x0 op x1) op x2) op ...
//   3. Each owner allreduces its shard with the owners of the same shard on the other nodes
//      (the communicator of its local rank: one rank per node).
//   4. An allgather within the node gives every rank every shard.
// Each rank sends (L-1)/L of the buffer within its node and 2(N-1)/N of a shard, 1/L of the
// buffer, across the network (N nodes), so a node's link carries what one rank's flat
// allreduce sends, and L streams share it.
// Every shard is reduced once on each node and once across nodes, and copied out, so every
// rank gets the same bits. Step 2 fixes the order within a node, so results do not depend on
// the buffer's length or on where a tensor sits in a fused buffer; step 3 is MPI's allreduce
// over the nodes. The result equals the flat allreduce's bit for bit wherever the reduction
// is exact (integers; Min and Max of any type, mpi_reduce_ops.h) and, for floating-point
// sums and products, where MPI's flat allreduce adds in the same order (tested with the
// mpich wheel: 2 nodes x 2 ranks in blocks, ranks 0-1 and 2-3; docs/settings.md).
// In kAuto, allreduces under 64 KiB stay flat (see kAutoAllreduceMinBytes); the size is the
// backend call's, the same on every rank.
//
// Allgather (any layout, nodes of different sizes too): each node's pieces are gathered to its
// leader (local rank 0), the leaders allgather their nodes' pieces across the network, and
// each leader broadcasts the whole result within its node. When rank order is node order
// (MpiNodes::blocks) the pieces land in place; otherwise the leaders go through a staging
// buffer in node order and copy each rank's piece to its place. Pure copies: the same bytes
// as the flat allgather.
//
// Nodes with different numbers of ranks cannot split the buffer alike, so there allreduce
// runs flat (said once, on rank 0, when it was asked for).
#pragma once

#include <cstdint>
#include <string>

#include "../../config.h"
#include "mpi_context.h"

namespace kerashvd {

// Which collectives of one communicator run node by node. Every rank of the communicator
// reaches the same plan (from the same settings and layout), so all take the same path.
struct HierarchyPlan {
  bool allreduce = false;
  bool allgather = false;
  // In kAuto, allreduces smaller than this stay flat (three steps cost more latency than one).
  int64_t allreduce_min_bytes = 0;
  std::string note;  // why a requested hierarchy is not used; "" when there is nothing to say
};

HierarchyPlan PlanHierarchy(const Config& config, const MpiContext& mpi);

}  // namespace kerashvd
