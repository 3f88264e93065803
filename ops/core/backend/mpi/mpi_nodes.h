// MpiNodes: a communicator's ranks grouped by node (host), for the hierarchical collectives
// (mpi_hierarchical.cc).
//
// A node is what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together: the ranks that can
// share memory. Within a node, ranks are numbered in the order of their rank in the parent
// communicator (local rank); nodes are numbered in the order of their lowest rank.
//
// Shards. The node-by-node allreduce cuts its buffer into G shards, G = the number of ranks of
// the largest node. On a node of L ranks, local rank i owns the shards ShardsOf(i) =
// [i*G/L, (i+1)*G/L): one each where L = G, several on a smaller node, and always a contiguous
// run. Each shard has one owner on every node; the owners of shard j talk over
// shard_comm(j), in which each node's owner has its node's number as its rank.
//
// Made only where there are two nodes or more; on one host there is nothing to keep.
#pragma once

#include <mpi.h>

#include <memory>
#include <utility>
#include <vector>

#include "../../status.h"

namespace kerashvd {

class MpiNodes {
 public:
  // Collective over `comm`. `local` is this rank's node communicator; the result takes it over
  // when there are 2+ nodes and frees it otherwise (*out null). `homogeneous` gets whether
  // every node has as many ranks; `node_of` (optional) the node of each rank of `comm`.
  static Status Create(MPI_Comm comm, MPI_Comm local, std::unique_ptr<MpiNodes>* out,
                       bool* homogeneous, std::vector<int>* node_of = nullptr);
  ~MpiNodes();
  MpiNodes(const MpiNodes&) = delete;
  MpiNodes& operator=(const MpiNodes&) = delete;

  MPI_Comm local() const { return local_; }
  // The owners of shard j, one a node, ranked by node; MPI_COMM_NULL for a shard this rank
  // does not own. shard_comm(0) is the nodes' leaders (local rank 0).
  MPI_Comm shard_comm(int j) const { return shard_comms_[j]; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return static_cast<int>(node_ranks_[node_].size()); }
  int num_nodes() const { return static_cast<int>(node_ranks_.size()); }
  int largest_node() const { return shards_; }
  int shards() const { return shards_; }
  // The shards [first, last) that local rank i of this node owns.
  std::pair<int, int> ShardsOf(int i) const {
    return {i * shards_ / local_size(), (i + 1) * shards_ / local_size()};
  }
  // This rank's node, and the ranks of node k in local-rank order.
  int node() const { return node_; }
  const std::vector<int>& node_ranks(int k) const { return node_ranks_[k]; }
  bool homogeneous() const { return homogeneous_; }
  // Whether rank order is node order: node 0's ranks first, then node 1's, and so on (SLURM's
  // default block distribution). Then a node's data is one contiguous piece of a gather.
  bool blocks() const { return blocks_; }

 private:
  MpiNodes() = default;
  MPI_Comm local_ = MPI_COMM_NULL;
  std::vector<MPI_Comm> shard_comms_;
  int local_rank_ = 0, node_ = 0, shards_ = 1;
  std::vector<std::vector<int>> node_ranks_;
  bool homogeneous_ = true, blocks_ = true;
};

}  // namespace kerashvd
