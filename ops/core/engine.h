// Engine: one per process. Owns MPI, the peer monitor, the timeline, the GPU plane and the
// lanes (lane.h): lane 0 runs the collectives of the whole world, and each process set this
// rank belongs to has a lane of its own, with its own communicator and background thread.
//
// Process sets are registered collectively: every rank calls AddProcessSet with the same
// ranks in the same order (at init() or later), and RemoveProcessSet likewise. Each call
// first compares the ranks' requests in one non-blocking allgather with the peer timeout, so
// that ranks that disagree, or a rank that never calls, give every rank an error naming what
// each rank asked for instead of a hang in MPI_Comm_split; then the members split a
// communicator off the engine's registry communicator (a duplicate of the world's).
// GPU collectives of a set other than the global one are negotiated and executed by the
// world's lane, not the set's: NCCL needs the collectives of the communicators of one GPU in
// the same order on every rank that shares them, and only the world's negotiation gives one
// order to all ranks. Each is ready when the set's members have submitted it; ranks outside
// the set drop it from their work list and run the rest in the same order, and the set's own
// NCCL communicator runs it on the world's lane thread, one collective at a time.
// AddSplitProcessSets is the same call for sets given as communicators (Horovod's
// ProcessSet(comm)): there each rank names only its own communicator's members, and one call
// registers every distinct set named. (Registration is in process_set_registry.cc.)
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "abort_flag.h"
#include "backend/gpu_plane.h"
#include "backend/mpi/mpi_context.h"
#include "config.h"
#include "executor.h"
#include "lane.h"
#include "peer_monitor.h"
#include "timeline.h"
#include "topology.h"

namespace kerashvd {

// What a rank knows about one process set.
struct ProcessSetView {
  int id = 0;
  int size = 0;            // number of members
  int rank = -1;           // this rank's index among the members; -1 when it is not one
  std::vector<int> ranks;  // the members' world ranks, ascending; left empty for set 0 (all)
};

class Engine {
 public:
  static Status Create(const Config& config, std::unique_ptr<Engine>* out);
  ~Engine();

  // Hands a collective to the lane of its process set. On error (engine stopped, unknown
  // process set, not a member) `entry.done` is not called; the caller reports the Status.
  Status Submit(TensorEntry entry);
  // Stops every lane on every rank: the first rank to call it stops all ranks' world lanes at
  // the next cycle; anything still pending fails with Aborted.
  void Shutdown();

  // Collective over all ranks (see above). `ranks`: ascending, distinct world ranks.
  Status AddProcessSet(const std::vector<int>& ranks, int* id);
  // Collective over all ranks. `mine`: the world ranks (ascending) of this rank's own
  // communicator, or none for a rank without one (MPI_COMM_NULL). The lists must partition
  // the ranks that name one: each lists itself, and its members name the same list. Each
  // distinct list becomes a set; `ids` and `lists` get them in the order of their lowest rank,
  // `my_index` the index of this rank's set (-1 without one).
  Status AddSplitProcessSets(const std::vector<int>& mine, std::vector<int>* ids,
                             std::vector<std::vector<int>>* lists, int* my_index);
  // Removes set `id` and the sets registered in the same call; `removed` gets their ids.
  Status RemoveProcessSet(int id, std::vector<int>* removed);
  Status ProcessSet(int id, ProcessSetView* view) const;
  std::vector<int> ProcessSetIds() const;

  // Starts (or restarts) writing a timeline; only rank 0 writes unless `path` contains
  // "{rank}", which is replaced by each rank's number.
  Status StartTimeline(const std::string& path, int64_t max_bytes);
  void StopTimeline() { timeline_.Stop(); }

  // This rank's straggler numbers for the world's collectives (straggler_stats.h), since the
  // engine started or the last reset; `reset` starts a new interval. Local, no communication.
  StragglerCounters StragglerSnapshot(bool reset) { return world_->StragglerSnapshot(reset); }

  const Config& config() const { return config_; }
  // Where this rank sits (what the bindings report).
  const Topology& topology() const { return topology_; }
  // The world's communicator, for the C++ GPU tests and benchmark (backend/nccl) only.
  const MpiContext& mpi() const { return *mpi_; }

 private:
  struct SetEntry {
    int id = 0;
    std::vector<int> ranks;
    int registration = 0;              // the first id registered by the same call
    std::unique_ptr<MpiContext> comm;  // members only
    std::unique_ptr<Lane> lane;        // members only
    // GPU collectives of the set (members only, in builds with a GPU backend): a second
    // communicator, since the world's lane thread uses it while the set's lane uses `comm`,
    // and the GPU plane over it, created by the set's first GPU group.
    std::unique_ptr<MpiContext> gpu_comm;
    std::unique_ptr<GpuPlane> gpu;
  };

  explicit Engine(const Config& config) : config_(config) {}
  void OnPeerFailure(int rank, const std::string& what);
  // A GPU tensor must be on the GPU of this process's earlier GPU tensors (checked locally,
  // before negotiation, so that a misplaced tensor never leaves the other ranks waiting).
  Status CheckDevice(const Request& request);
  // The executor for a group of the world lane: host or GPU, by where its tensors live. The
  // first GPU group creates the GPU plane, collectively (see backend/gpu_plane.h).
  Status ExecutorFor(const std::vector<WorkItem*>& group, Executor* host, Executor** out);
  // Whether world rank `rank` is a member of process set `id` (for the world's lane).
  bool IsMember(int id, int rank) const;
  // Step 1 of a registration: every rank's request, gathered with the peer timeout (`all`:
  // rank r's request at r * request.size()). AgreeOnRegistration also requires them equal.
  Status ExchangeRegistration(const std::vector<uint64_t>& request, const char* what,
                              std::vector<uint64_t>* all);
  Status AgreeOnRegistration(const std::vector<uint64_t>& request, const char* what);
  Status Disagreement(const char* what, const std::vector<uint64_t>& all, size_t n,
                      const std::string& rule) const;
  std::string DescribeRegistration(const uint64_t* request) const;
  // Step 2, once every rank has the same lists: refuses the global set and existing sets
  // (identically everywhere), then splits one communicator per list and starts this rank's
  // lane. `my_index`: this rank's list, or -1.
  Status CreateSets(const std::vector<std::vector<int>>& lists, int my_index,
                    std::vector<int>* ids);

  Config config_;
  AbortFlag abort_;  // set when a peer fails; every wait in a collective checks it
  std::unique_ptr<MpiContext> mpi_;
  Topology topology_;
  Timeline timeline_;
  std::unique_ptr<Lane> world_;         // process set 0
  std::unique_ptr<GpuPlane> gpu_;       // GPU tensors; created by the first GPU group
  std::atomic<int> gpu_device_{-1};     // the GPU of the first GPU tensor submitted
  std::unique_ptr<PeerMonitor> monitor_;

  // Process sets other than 0. The registry mutex serializes registrations (the caller's
  // thread); sets_mutex_ guards `sets_` for Submit and the queries.
  std::mutex registry_mutex_;
  MPI_Comm registry_comm_ = MPI_COMM_NULL;
  Status registry_broken_;
  int next_set_id_ = 1;
  mutable std::mutex sets_mutex_;
  std::map<int, std::shared_ptr<SetEntry>> sets_;
  // Removed sets with a GPU communicator: a GPU collective of the set still pending on the
  // world's lane when it was removed can then run on every member alike.
  std::vector<std::shared_ptr<SetEntry>> retired_;
  // The members of every set registered so far, removed ones too (ids are never reused): the
  // world's lane asks who takes part in a set's GPU collective, and every rank must keep
  // giving the same answer while the set is being removed.
  std::map<int, std::vector<int>> members_;
};

}  // namespace kerashvd
