// Engine: one per process. It creates the parts and wires them together, hands each submitted
// collective to its lane, and stops everything at shutdown or when a peer fails:
//   Group               the world's communicator, made by the backend's factory (group.h)
//   Lane                one per communicator: queue, negotiation, fusion, host executor and
//                       background thread (lane.h); lane 0 runs the whole world's collectives
//   SetLanes            this rank's lanes of the process sets it belongs to (set_lanes.h)
//   ProcessSetRegistry  the sets, their registration protocol and the membership check
//   DeviceRouter        the GPU planes, and which executor runs each group of the world lane
//   PeerMonitor         heartbeats; a dead or frozen peer sets the AbortFlag
//   Timeline            the Chrome-trace timeline
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "abort_flag.h"
#include "config.h"
#include "device_router.h"
#include "group.h"
#include "lane.h"
#include "peer_monitor.h"
#include "process_set_registry.h"
#include "set_lanes.h"
#include "timeline.h"
#include "topology.h"

namespace kerashvd {

class Engine {
 public:
  // Makes the world's group: the backend's factory (CreateMpiWorld, backend/mpi/mpi_world.h;
  // the unit tests' FakeGroup). `abort` is the engine's and outlives the group.
  using WorldFactory =
      std::function<Status(const Config&, const AbortFlag* abort, std::unique_ptr<Group>* out)>;

  // Collective over the world's ranks.
  static Status Create(const Config& config, const WorldFactory& make_world,
                       std::unique_ptr<Engine>* out);
  ~Engine();

  // Hands a collective to the lane of its process set. On error (engine stopped, unknown
  // process set, not a member) `entry.done` is not called; the caller reports the Status.
  // A join goes to every lane of this rank (SubmitJoin).
  Status Submit(TensorEntry entry);
  // Stops every lane on every rank: the first rank to call it stops all ranks' world lanes at
  // the next cycle; anything still pending fails with Aborted.
  void Shutdown();

  // Registering, removing and querying process sets (collective where it says so).
  ProcessSetRegistry& process_sets() { return *registry_; }
  const ProcessSetRegistry& process_sets() const { return *registry_; }

  // Starts (or restarts) writing a timeline; only rank 0 writes unless `path` contains
  // "{rank}", which is replaced by each rank's number.
  Status StartTimeline(const std::string& path, int64_t max_bytes);
  void StopTimeline() { timeline_.Stop(); }

  // This rank's straggler numbers for the world's collectives (straggler_stats.h), since the
  // engine started or the last reset; `reset` starts a new interval. Local, no communication.
  StragglerCounters StragglerSnapshot(bool reset) { return world_->StragglerSnapshot(reset); }

  const Config& config() const { return config_; }
  // Where this rank sits (what the bindings and the GPU test programs read).
  const Topology& topology() const { return topology_; }

 private:
  explicit Engine(const Config& config) : config_(config) {}
  void OnPeerFailure(int rank, const std::string& what);
  // join() is global: this rank joins the world's lane and the lane of every process set it
  // belongs to, so that it contributes the identity to the sets' allreduces too (and the
  // sets' other collectives fail naming it), and join() completes when every lane's join has:
  // each lane's join ends in one of its cycles on all its members at once (coordinator.h),
  // so no member's later collective can be mistaken for one made under the join. The result
  // is the world's (the rank that joined last).
  Status SubmitJoin(TensorEntry entry);

  // Declared in the order they are built; destroyed the other way round, each part before
  // what it uses.
  Config config_;
  AbortFlag abort_;  // set when a peer fails; every wait in a collective checks it
  std::unique_ptr<Group> world_group_;
  Topology topology_;
  Timeline timeline_;
  std::unique_ptr<DeviceRouter> router_;
  std::unique_ptr<SetLanes> set_lanes_;
  std::unique_ptr<ProcessSetRegistry> registry_;
  std::unique_ptr<Lane> world_;  // process set 0
  std::unique_ptr<PeerMonitor> monitor_;
};

}  // namespace kerashvd
