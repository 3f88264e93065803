// Engine: one per process. It creates the parts and wires them together, hands each submitted
// collective to its lane, and stops everything at shutdown or when a peer fails:
//   MpiContext          the world's communicator and the topology (backend/mpi)
//   Lane                one per communicator: queue, negotiation, fusion, host executor and
//                       background thread (lane.h); lane 0 runs the whole world's collectives,
//                       and each process set this rank belongs to has a lane of its own
//   ProcessSetRegistry  the sets, their registration protocol and the membership check
//   DeviceRouter        the GPU planes, and which executor runs each group of the world lane
//   PeerMonitor         heartbeats; a dead or frozen peer sets the AbortFlag
//   Timeline            the Chrome-trace timeline
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "abort_flag.h"
#include "backend/mpi/mpi_context.h"
#include "config.h"
#include "device_router.h"
#include "lane.h"
#include "peer_monitor.h"
#include "process_set_registry.h"
#include "timeline.h"
#include "topology.h"

namespace kerashvd {

class Engine : private ProcessSetRegistry::Host {
 public:
  static Status Create(const Config& config, std::unique_ptr<Engine>* out);
  ~Engine() override;

  // Hands a collective to the lane of its process set. On error (engine stopped, unknown
  // process set, not a member) `entry.done` is not called; the caller reports the Status.
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
  // Where this rank sits (what the bindings report).
  const Topology& topology() const { return topology_; }
  // The world's communicator, for the C++ GPU tests and benchmark (backend/nccl) only.
  const MpiContext& mpi() const { return *mpi_; }

 private:
  // This rank's lane of a process set, and the communicator it runs on.
  struct SetLane {
    std::unique_ptr<MpiContext> comm;
    std::unique_ptr<Lane> lane;
  };

  explicit Engine(const Config& config) : config_(config) {}
  void OnPeerFailure(int rank, const std::string& what);
  // ProcessSetRegistry::Host
  Status StartSet(int id, const std::vector<int>& ranks, std::unique_ptr<Group> group) override;
  void StopSets(const std::vector<int>& ids) override;

  Config config_;
  AbortFlag abort_;  // set when a peer fails; every wait in a collective checks it
  std::unique_ptr<MpiContext> mpi_;
  Topology topology_;
  Timeline timeline_;
  std::unique_ptr<Lane> world_;  // process set 0
  std::unique_ptr<DeviceRouter> router_;
  std::unique_ptr<ProcessSetRegistry> registry_;
  std::unique_ptr<PeerMonitor> monitor_;
  std::mutex lanes_mutex_;  // guards set_lanes_ (registrations vs. Submit and peer failure)
  std::map<int, std::shared_ptr<SetLane>> set_lanes_;
};

}  // namespace kerashvd
