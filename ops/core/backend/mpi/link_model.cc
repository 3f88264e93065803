#include "link_model.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace kerashvd {
namespace {

struct Message {
  int from, to;
  double bytes;  // in units of S
};
using Round = std::vector<Message>;

int LargestPowerOfTwo(int p) {
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  return pof2;
}

// MPICH's recursive doubling and Rabenseifner share their handling of p that is not a power of
// two: rank 2i sends its data to 2i+1 (i < r = p - p') first and gets the result back last;
// the other p' ranks are numbered 0 .. p'-1 in between.
struct PowerOfTwoPart {
  explicit PowerOfTwoPart(int p) : pof2(LargestPowerOfTwo(p)), rem(p - pof2) {}
  int Real(int newrank) const { return newrank < rem ? 2 * newrank + 1 : newrank + rem; }
  Round Before() const {
    Round round;
    for (int i = 0; i < rem; ++i) round.push_back({2 * i, 2 * i + 1, 1.0});
    return round;
  }
  Round After() const {
    Round round;
    for (int i = 0; i < rem; ++i) round.push_back({2 * i + 1, 2 * i, 1.0});
    return round;
  }
  // Every one of the p' ranks exchanges `bytes` with the partner at distance `mask`.
  Round Exchange(int mask, double bytes) const {
    Round round;
    for (int n = 0; n < pof2; ++n) round.push_back({Real(n), Real(n ^ mask), bytes});
    return round;
  }
  int pof2, rem;
};

std::vector<Round> RecursiveDoubling(int p) {
  const PowerOfTwoPart part(p);
  std::vector<Round> rounds{part.Before()};
  for (int mask = 1; mask < part.pof2; mask <<= 1) rounds.push_back(part.Exchange(mask, 1.0));
  rounds.push_back(part.After());
  return rounds;
}

std::vector<Round> ReduceScatterAllgather(int p) {
  const PowerOfTwoPart part(p);
  std::vector<Round> rounds{part.Before()};
  int mask = 1;
  for (; mask < part.pof2; mask <<= 1) rounds.push_back(part.Exchange(mask, 0.5 / mask));
  for (mask >>= 1; mask > 0; mask >>= 1) rounds.push_back(part.Exchange(mask, 0.5 / mask));
  rounds.push_back(part.After());
  return rounds;
}

// Ring: 2(p-1) rounds alike, in each of which every rank sends S/p to rank+1; counted once
// (p messages, not 2p(p-1)).
double RingTime(const std::vector<int>& node_of) {
  const int p = static_cast<int>(node_of.size());
  if (p < 2) return 0.0;
  const int nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
  std::vector<double> out(nodes, 0.0), in(nodes, 0.0);
  for (int r = 0; r < p; ++r) {
    const int next = node_of[(r + 1) % p];
    if (next == node_of[r]) continue;
    out[node_of[r]] += 1.0 / p;
    in[next] += 1.0 / p;
  }
  double longest = 0;
  for (int k = 0; k < nodes; ++k) longest = std::max({longest, out[k], in[k]});
  return 2.0 * (p - 1) * longest;
}

// k-ary tree rooted at 0 (parent of r: (r-1)/k): one round per level, up then down.
std::vector<Round> Tree(int p, int k) {
  k = std::max(k, 1);
  std::vector<int> depth(p, 0);
  int deepest = 0;
  for (int r = 1; r < p; ++r) deepest = std::max(deepest, depth[r] = depth[(r - 1) / k] + 1);
  std::vector<Round> up(deepest), down(deepest);
  for (int r = 1; r < p; ++r) {
    const int parent = (r - 1) / k;
    up[deepest - depth[r]].push_back({r, parent, 1.0});
    down[depth[r] - 1].push_back({parent, r, 1.0});
  }
  up.insert(up.end(), down.begin(), down.end());
  return up;
}

double TimeOf(const std::vector<Round>& rounds, const std::vector<int>& node_of) {
  const int nodes = node_of.empty() ? 0 : *std::max_element(node_of.begin(), node_of.end()) + 1;
  double total = 0;
  for (const Round& round : rounds) {
    std::vector<double> out(nodes, 0.0), in(nodes, 0.0);
    for (const Message& m : round) {
      if (node_of[m.from] == node_of[m.to]) continue;
      out[node_of[m.from]] += m.bytes;
      in[node_of[m.to]] += m.bytes;
    }
    double longest = 0;
    for (int k = 0; k < nodes; ++k) longest = std::max({longest, out[k], in[k]});
    total += longest;
  }
  return total;
}

int CountNodes(const std::vector<int>& node_of) {
  return node_of.empty() ? 0 : *std::max_element(node_of.begin(), node_of.end()) + 1;
}

// MPICH's built-in choice for MPI_Iallreduce on an intracommunicator (its default tuning
// table): recursive doubling for 2 KiB or less, for user-defined reductions and for fewer
// elements than p'; reduce-scatter + allgather otherwise.
FlatAlgorithm MpichDefault(int64_t bytes, int64_t count, bool builtin_op, int p) {
  if (bytes <= 2048 || !builtin_op || count < LargestPowerOfTwo(p))
    return FlatAlgorithm::kRecursiveDoubling;
  return FlatAlgorithm::kReduceScatterAllgather;
}

std::string Fixed(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

}  // namespace

double HierarchicalLinkTime(int num_nodes) {
  return num_nodes < 2 ? 0.0 : 2.0 * (num_nodes - 1) / num_nodes;
}

double FlatLinkTime(FlatAlgorithm algorithm, const std::vector<int>& node_of, int tree_k) {
  const int p = static_cast<int>(node_of.size());
  switch (algorithm) {
    case FlatAlgorithm::kRecursiveDoubling: return TimeOf(RecursiveDoubling(p), node_of);
    case FlatAlgorithm::kReduceScatterAllgather:
      return TimeOf(ReduceScatterAllgather(p), node_of);
    case FlatAlgorithm::kRing: return RingTime(node_of);
    case FlatAlgorithm::kTree: return TimeOf(Tree(p, tree_k), node_of);
    case FlatAlgorithm::kSmp: {
      // The leaders, one a node, run MPICH's default for a large allreduce among themselves.
      const int nodes = CountNodes(node_of);
      std::vector<int> leaders(nodes);
      for (int k = 0; k < nodes; ++k) leaders[k] = k;
      return FlatLinkTime(MpichDefault(int64_t{1} << 30, int64_t{1} << 28, true, nodes),
                          leaders);
    }
    default: return -1.0;
  }
}

FlatAlgorithm FlatAlgorithmFromMpich(const std::string& name, int recexch_k, bool tuning_file) {
  if (name == "auto" || name == "sched_auto")
    return tuning_file ? FlatAlgorithm::kUnknown : FlatAlgorithm::kMpichDefault;
  if (name == "sched_recursive_doubling") return FlatAlgorithm::kRecursiveDoubling;
  if (name == "tsp_recexch_single_buffer" || name == "tsp_recexch_multiple_buffer")
    return recexch_k == 2 ? FlatAlgorithm::kRecursiveDoubling : FlatAlgorithm::kUnknown;
  if (name == "sched_reduce_scatter_allgather") return FlatAlgorithm::kReduceScatterAllgather;
  if (name == "tsp_ring") return FlatAlgorithm::kRing;
  if (name == "tsp_tree") return FlatAlgorithm::kTree;
  if (name == "sched_smp") return FlatAlgorithm::kSmp;
  return FlatAlgorithm::kUnknown;
}

const char* FlatAlgorithmName(FlatAlgorithm algorithm) {
  switch (algorithm) {
    case FlatAlgorithm::kMpichDefault: return "MPICH's default";
    case FlatAlgorithm::kRecursiveDoubling: return "recursive doubling";
    case FlatAlgorithm::kReduceScatterAllgather: return "reduce-scatter + allgather";
    case FlatAlgorithm::kRing: return "ring";
    case FlatAlgorithm::kTree: return "tree";
    case FlatAlgorithm::kSmp: return "smp (node-aware)";
    default: return "unknown";
  }
}

LinkModel::LinkModel(LinkModelInputs inputs) : in_(std::move(inputs)) {
  num_nodes_ = CountNodes(in_.node_of);
  std::vector<int> per_node(num_nodes_, 0);
  for (int k : in_.node_of) largest_node_ = std::max(largest_node_, ++per_node[k]);
  hierarchical_time_ = HierarchicalLinkTime(num_nodes_);
  // The algorithms this allreduce can take: MPICH's default picks one of two per call.
  flat_time_.assign(static_cast<int>(FlatAlgorithm::kSmp) + 1, -1.0);
  std::vector<FlatAlgorithm> used{in_.algorithm};
  if (in_.algorithm == FlatAlgorithm::kMpichDefault)
    used = {FlatAlgorithm::kRecursiveDoubling, FlatAlgorithm::kReduceScatterAllgather};
  for (FlatAlgorithm a : used)
    flat_time_[static_cast<int>(a)] = FlatLinkTime(a, in_.node_of, in_.tree_k);
}

FlatAlgorithm LinkModel::Resolve(int64_t bytes, int64_t count, bool builtin_op) const {
  if (in_.algorithm != FlatAlgorithm::kMpichDefault) return in_.algorithm;
  return MpichDefault(bytes, count, builtin_op, static_cast<int>(in_.node_of.size()));
}

double LinkModel::FlatTime(int64_t bytes, int64_t count, bool builtin_op) const {
  return flat_time_[static_cast<int>(Resolve(bytes, count, builtin_op))];
}

bool LinkModel::UseHierarchical(int64_t bytes, int64_t count, bool builtin_op) const {
  if (!has_nodes() || in_.mode == Hierarchical::kOff) return false;
  if (in_.mode == Hierarchical::kOn) return true;
  if (bytes < kAutoMinBytes) return false;
  const double flat = FlatTime(bytes, count, builtin_op);
  if (flat < 0) return largest_node_ >= 2;  // unknown algorithm: wherever a node runs several
  return flat > kAutoMargin * hierarchical_time_;
}

std::string LinkModel::Describe() const {
  std::map<int, int> per_node;
  for (int k : in_.node_of) ++per_node[k];
  std::ostringstream text;
  text << num_nodes_ << " nodes (";
  for (const auto& [node, ranks] : per_node) text << (node ? "+" : "") << ranks;
  text << " ranks, " << ([&] {
    for (size_t r = 1; r < in_.node_of.size(); ++r)
      if (in_.node_of[r] < in_.node_of[r - 1]) return "not in node order";
    return "in node order";
  })() << "); MPI's allreduce: " << FlatAlgorithmName(in_.algorithm);
  const double flat = FlatTime(int64_t{1} << 30, int64_t{1} << 28, true);
  text << "; link time of a large allreduce, in units of its bytes over a link's bandwidth: flat "
       << (flat < 0 ? std::string("unknown") : Fixed(flat)) << ", node by node "
       << Fixed(hierarchical_time_) << "; a large allreduce runs "
       << (UseHierarchical(int64_t{1} << 30, int64_t{1} << 28, true) ? "node by node" : "flat");
  return text.str();
}

}  // namespace kerashvd
