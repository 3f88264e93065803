// MpiNodes: a communicator's ranks grouped by node (host), for the hierarchical collectives
// (mpi_hierarchical.cc).
//
// A node is what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together: the ranks that can
// share memory. Within a node, ranks are numbered in the order of their rank in the parent
// communicator (local rank); nodes are numbered in the order of their lowest rank, so a
// node's leader (local rank 0) has that node's number as its rank among the leaders.
//
// Made only where a hierarchy exists (two nodes or more, and some node with two ranks or
// more): on one host, or with one rank per node, there are no extra communicators to keep.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "../../status.h"

namespace kerashvd {

class MpiNodes {
 public:
  // Collective over `comm`. `local` and `cross` are this rank's node communicator and the
  // communicator of the ranks with its local rank (one per node that has such a rank); the
  // result takes them over when there is a hierarchy, and frees them otherwise (*out null).
  // `homogeneous` gets whether every node has as many ranks.
  static Status Create(MPI_Comm comm, MPI_Comm local, MPI_Comm cross,
                       std::unique_ptr<MpiNodes>* out, bool* homogeneous);
  ~MpiNodes();
  MpiNodes(const MpiNodes&) = delete;
  MpiNodes& operator=(const MpiNodes&) = delete;

  MPI_Comm local() const { return local_; }
  MPI_Comm cross() const { return cross_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return static_cast<int>(node_ranks_[node_].size()); }
  int num_nodes() const { return static_cast<int>(node_ranks_.size()); }
  // This rank's node, and the ranks of node k in local-rank order.
  int node() const { return node_; }
  const std::vector<int>& node_ranks(int k) const { return node_ranks_[k]; }
  bool homogeneous() const { return homogeneous_; }
  // Whether rank order is node order: node 0's ranks first, then node 1's, and so on (SLURM's
  // default block distribution). Then a node's data is one contiguous piece of a gather.
  bool blocks() const { return blocks_; }

 private:
  MpiNodes() = default;
  MPI_Comm local_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  int local_rank_ = 0, node_ = 0;
  std::vector<std::vector<int>> node_ranks_;
  bool homogeneous_ = true, blocks_ = true;
};

}  // namespace kerashvd
