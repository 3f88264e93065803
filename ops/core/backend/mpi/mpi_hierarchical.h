// Hierarchical allreduce and allgather on host memory: the data crosses the network once per
// node instead of once per rank, and everything else moves within nodes over shared memory.
// (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER; here KERASHVD_HIERARCHICAL_*.)
//
// Allreduce of `count` elements on N nodes (any number of ranks each; MpiNodes), in steps:
//   1. The buffer is cut into G shards (G = ranks of the largest node; the first count % G one
//      element longer). Each rank owns a contiguous run of them (MpiNodes::ShardsOf). An
//      alltoall within the node hands each owner every local rank's copy of its shards, and
//      the owner reduces those copies in local-rank order: ((x0 op x1) op x2) op ...
//   2. For each shard it owns, the owner and the shard's owners on the other nodes (its
//      shard_comm) cut the shard into N blocks; an alltoall hands node k's owner every node's
//      partial result of block k, which it reduces in node order.
//   3. An allgather among the same owners gives each the whole reduced shard.
//   4. An allgather within the node gives every rank every shard.
// Each node sends and receives 2(N-1)/N of the buffer across its link, in two rounds, the
// least an allreduce can (link_model.h), whatever the placement of ranks, and its ranks share
// that traffic. Every element is reduced within each node in local-rank order and across the
// nodes in node order, once, and copied out, so every rank gets the same bits, and they do not
// depend on the buffer's length or on where a tensor sits in a fused buffer. They equal the
// flat allreduce's bit for bit wherever the reduction is exact (integers; Min and Max of any
// type, mpi_reduce_ops.h) and, for floating-point sums and products, where MPI's flat
// allreduce adds in the same order (2 nodes x 2 ranks in blocks with the mpich wheel, whose
// reduce-scatter adds within the nodes first; tested, docs/benchmarks.md).
// In kAuto, LinkModel decides for each allreduce from its size and MPI's algorithm for it.
//
// Allgather (any layout, nodes of different sizes too): each node's pieces are gathered to its
// leader (local rank 0), the leaders allgather their nodes' pieces across the network, and
// each leader broadcasts the whole result within its node. When rank order is node order
// (MpiNodes::blocks) the pieces land in place; otherwise the leaders go through a staging
// buffer in node order and copy each rank's piece to its place. Pure copies: the same bytes
// as the flat allgather.
#pragma once

#include <optional>
#include <string>

#include "../../config.h"
#include "link_model.h"
#include "mpi_context.h"

namespace kerashvd {

// Which collectives of one communicator run node by node. Every rank of the communicator gets
// the same plan: it is made from rank 0's settings and MPI algorithm (broadcast) and the
// layout (gathered), so all take the same path for every allreduce.
struct HierarchyPlan {
  std::optional<LinkModel> allreduce;  // decides each allreduce; none: all flat
  bool allgather = false;
  // Said on this rank when its own settings differ from rank 0's ("" when they agree).
  std::string note;
};

// Collective over `mpi` where it spans 2+ nodes; local (and all flat) on one node.
HierarchyPlan PlanHierarchy(const Config& config, const MpiContext& mpi);

}  // namespace kerashvd
