// SetLanes: this rank's lanes of the process sets it belongs to (lane.h), one per set, each
// over the set's own group. The process-set registry starts and stops them (it is the
// registry's Host); the engine hands them the host collectives of their sets. In builds with
// a GPU plane, a new set's members also make a second group for the set's GPU collectives and
// give it to the DeviceRouter, which runs those on the world's lane (device_router.h).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "abort_flag.h"
#include "config.h"
#include "device_router.h"
#include "group.h"
#include "lane.h"
#include "process_set_registry.h"
#include "timeline.h"

namespace kerashvd {

class SetLanes : public ProcessSetRegistry::Host {
 public:
  // The engine's parts, which outlive this object.
  SetLanes(const Config& config, AbortFlag* abort, Timeline* timeline, DeviceRouter* router)
      : config_(config), abort_(abort), timeline_(timeline), router_(router) {}
  ~SetLanes() override { StopAll(); }

  // ProcessSetRegistry::Host. StartSet is collective over `group` (with a GPU plane built).
  Status StartSet(int id, const std::vector<int>& ranks, std::unique_ptr<Group> group) override;
  void StopSets(const std::vector<int>& ids) override;

  // Set `id`'s lane, or null when this rank has none (not a member, or the set was removed).
  // The lane stays usable while the caller holds it.
  std::shared_ptr<Lane> Find(int id);
  // Every lane of this rank's sets, each usable while the caller holds it.
  std::vector<std::shared_ptr<Lane>> All();
  // Ends the lanes' waits early (a peer failed: each loop then stops with the abort status).
  void WakeAll();
  // Stops every lane (at shutdown; the members stop each lane together).
  void StopAll();

 private:
  // A lane and the group it runs over.
  struct SetLane {
    std::unique_ptr<Group> group;  // declared first: the lane's transport uses it
    std::unique_ptr<Lane> lane;
  };
  static void Stop(std::vector<std::shared_ptr<SetLane>> sets);

  const Config config_;
  AbortFlag* abort_;
  Timeline* timeline_;
  DeviceRouter* router_;
  std::mutex mutex_;  // guards lanes_ (registrations vs. submissions and peer failure)
  std::map<int, std::shared_ptr<SetLane>> lanes_;
};

}  // namespace kerashvd
