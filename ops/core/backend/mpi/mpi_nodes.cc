#include "mpi_nodes.h"

#include <algorithm>
#include <map>

#include "mpi_context.h"

namespace kerashvd {

Status MpiNodes::Create(MPI_Comm comm, MPI_Comm local, std::unique_ptr<MpiNodes>* out,
                        bool* homogeneous, std::vector<int>* node_of) {
  out->reset();
  int rank = 0, size = 1, local_rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(local, &local_rank);
  // Every rank learns every rank's node, named by the node's lowest rank (its leader).
  int leader = rank;
  Status status = MpiStatus(MPI_Bcast(&leader, 1, MPI_INT, 0, local), "MPI_Bcast");
  std::vector<int> leader_of(size);
  if (status.ok())
    status = MpiStatus(MPI_Allgather(&leader, 1, MPI_INT, leader_of.data(), 1, MPI_INT, comm),
                       "MPI_Allgather");
  if (!status.ok()) {
    MPI_Comm_free(&local);
    return status;
  }
  std::map<int, std::vector<int>> by_leader;  // ordered by leader: node order
  for (int r = 0; r < size; ++r) by_leader[leader_of[r]].push_back(r);
  std::unique_ptr<MpiNodes> nodes(new MpiNodes());
  size_t largest = 0;
  for (auto& [first, ranks] : by_leader) {
    if (first == leader) nodes->node_ = static_cast<int>(nodes->node_ranks_.size());
    largest = std::max(largest, ranks.size());
    nodes->node_ranks_.push_back(std::move(ranks));
  }
  int next = 0;
  if (node_of) node_of->assign(size, 0);
  for (size_t k = 0; k < nodes->node_ranks_.size(); ++k) {
    const auto& ranks = nodes->node_ranks_[k];
    if (ranks.size() != nodes->node_ranks_[0].size()) nodes->homogeneous_ = false;
    for (int r : ranks) {
      nodes->blocks_ = nodes->blocks_ && r == next++;
      if (node_of) (*node_of)[r] = static_cast<int>(k);
    }
  }
  *homogeneous = nodes->homogeneous_;
  if (nodes->node_ranks_.size() < 2) {  // one node: nothing to keep
    MPI_Comm_free(&local);
    return Status::Ok();
  }
  nodes->local_ = local;
  nodes->local_rank_ = local_rank;
  nodes->shards_ = static_cast<int>(largest);
  // One split per shard (collective over `comm`): its owners, ranked by node.
  const auto [first, last] = nodes->ShardsOf(local_rank);
  nodes->shard_comms_.assign(nodes->shards_, MPI_COMM_NULL);
  for (int j = 0; j < nodes->shards_ && status.ok(); ++j)
    status = MpiStatus(MPI_Comm_split(comm, first <= j && j < last ? 0 : MPI_UNDEFINED,
                                      nodes->node_, &nodes->shard_comms_[j]),
                       "MPI_Comm_split");
  if (!status.ok()) return status;  // the destructor frees what was made
  *out = std::move(nodes);
  return Status::Ok();
}

MpiNodes::~MpiNodes() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || MpiBroken()) return;
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  for (MPI_Comm& c : shard_comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

}  // namespace kerashvd
