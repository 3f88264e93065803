// LinkModel: how long an allreduce keeps the nodes' network links busy, flat (MPI's own
// algorithm on the whole communicator) and node by node (mpi_hierarchical.h), and the choice
// `hierarchical_allreduce=auto` makes from it. Pure C++ (no MPI), so the unit tests check every
// case of the rule (ops/core/tests/link_model_test.cc).
//
// The model. An algorithm is a sequence of rounds, each a set of messages (sender, receiver,
// bytes); a round ends when its messages have arrived, and the next one needs its results.
// A message between ranks of one node costs nothing (shared memory); one between nodes uses the
// sending node's link out and the receiving node's link in (each direction has its own
// bandwidth B, as on switched full-duplex Ethernet or InfiniBand). A round then takes
//   max over nodes of max(bytes out of the node, bytes into it) / B,
// and the algorithm the sum of its rounds. Times are in units of S / B (S: the allreduce's
// bytes), so they depend only on the layout of ranks on nodes and the algorithm, not on the
// size or the link. Latency is left out: allreduces under kAutoMinBytes stay flat instead.
//
// Patterns, as MPICH 4-5 runs them (schedules checked with MPIR_CVAR_COLL_SCHED_DUMP=1):
//   recursive doubling: p' = the largest power of two <= p, r = p - p'. Ranks 2i and 2i+1,
//     i < r, first combine (2i sends S to 2i+1); p' ranks then exchange S with the partner
//     at distance 1, 2, 4, ... (in the numbering without the 2i); 2i+1 finally sends to 2i.
//   reduce-scatter + allgather (Rabenseifner): the same first and last steps; then partners at
//     distance 1, 2, 4, ... exchange S/2, S/4, S/8, ... (recursive halving), and the same
//     partners in reverse order S/2^k back (recursive doubling of the pieces).
//   ring: 2(p-1) rounds in which every rank sends S/p to rank+1.
//   tree (k-ary): each rank sends S to its parent, level by level up, then the root's result
//     goes down the same way.
//   smp: reduce within each node, the nodes' leaders allreduce (MPICH's default choice for
//     them), broadcast within each node: node-aware already.
// Node by node (mpi_hierarchical.h): the node's ranks reduce shards among themselves, each
// shard's owners on the N nodes exchange the N blocks of it (an alltoall, each node sending and
// receiving (N-1)/N S), reduce, and allgather the blocks ((N-1)/N S again): 2(N-1)/N, the
// least any allreduce can move over a node's link.
//
// The rule for auto (UseHierarchical): node by node where a hierarchy exists, the allreduce has
// at least kAutoMinBytes, and MPI's flat algorithm for it keeps the links busy more than
// kAutoMargin times as long as node by node; flat otherwise. Where the flat algorithm is not
// known (another MPI, MPICH with a tuning file or an algorithm not modelled here), node by node
// wherever a node runs several ranks, as Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../../config.h"

namespace kerashvd {

// MPI's algorithm for the flat allreduce (MPI_Iallreduce), as its settings name it.
enum class FlatAlgorithm : int {
  kUnknown = 0,         // not MPICH, or an algorithm or tuning file the model does not know
  kMpichDefault,        // MPICH's built-in choice (MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM=auto)
  kRecursiveDoubling,   // sched_recursive_doubling; tsp_recexch_* with k = 2
  kReduceScatterAllgather,  // sched_reduce_scatter_allgather (Rabenseifner)
  kRing,                // tsp_ring
  kTree,                // tsp_tree, k-ary (k = MPIR_CVAR_IALLREDUCE_TREE_KVAL)
  kSmp,                 // sched_smp: node-aware
};

// What the rule needs to know: the same value on every rank of the communicator (rank 0's,
// broadcast; mpi_hierarchical.cc).
struct LinkModelInputs {
  Hierarchical mode = Hierarchical::kAuto;
  FlatAlgorithm algorithm = FlatAlgorithm::kUnknown;
  int tree_k = 2;  // for kTree
  // Node (0, 1, ...) of each rank of the communicator, nodes numbered by their lowest rank.
  std::vector<int> node_of;
};

class LinkModel {
 public:
  // Allreduces under this many bytes stay flat in auto: there the rounds' latency, not the
  // bytes, sets the time, and node by node adds two steps within the nodes.
  static constexpr int64_t kAutoMinBytes = int64_t{64} << 10;
  // Node by node must save more than this factor of link time to be chosen.
  static constexpr double kAutoMargin = 1.1;

  explicit LinkModel(LinkModelInputs inputs);

  // Whether an allreduce of `count` elements, `bytes` in all, with a reduction that is one of
  // MPI's own operations (`builtin_op`) or a user-defined one, runs node by node.
  bool UseHierarchical(int64_t bytes, int64_t count, bool builtin_op) const;
  // Link time (units of S / B) of the flat algorithm MPI runs for such an allreduce (-1 where
  // not known), and of node by node.
  double FlatTime(int64_t bytes, int64_t count, bool builtin_op) const;
  double HierarchicalTime() const { return hierarchical_time_; }
  // Whether there is a hierarchy to use: 2+ nodes.
  bool has_nodes() const { return num_nodes_ >= 2; }
  // One line: the layout, MPI's algorithm, both link times for a large allreduce, the choice.
  std::string Describe() const;

 private:
  // The algorithm MPICH runs for one allreduce (kMpichDefault resolved).
  FlatAlgorithm Resolve(int64_t bytes, int64_t count, bool builtin_op) const;
  LinkModelInputs in_;
  int num_nodes_ = 0, largest_node_ = 0;
  double hierarchical_time_ = 0;
  std::vector<double> flat_time_;  // by FlatAlgorithm; -1 where not modelled or not used
};

// Link time (units of S / B) of `algorithm` on ranks placed on nodes as `node_of` says; -1 for
// kUnknown and kMpichDefault (which depends on the allreduce). `tree_k`: for kTree.
double FlatLinkTime(FlatAlgorithm algorithm, const std::vector<int>& node_of, int tree_k = 2);
// Link time of the node-by-node allreduce on `num_nodes` nodes: 2(N-1)/N.
double HierarchicalLinkTime(int num_nodes);
// FlatAlgorithm from MPICH's name of an MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM value ("auto",
// "sched_ring", ...); `recexch_k`: MPIR_CVAR_IALLREDUCE_RECEXCH_KVAL. `tuning_file`: whether
// MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE replaces MPICH's built-in choice.
FlatAlgorithm FlatAlgorithmFromMpich(const std::string& name, int recexch_k, bool tuning_file);
const char* FlatAlgorithmName(FlatAlgorithm algorithm);

}  // namespace kerashvd
