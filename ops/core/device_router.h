// DeviceRouter: where the world lane runs each group: on the host executor, or on the GPU
// plane of the world or of a process set (backend/gpu_plane.h).
//
// GPU collectives of a set other than the global one are negotiated and executed by the
// world's lane, not the set's: NCCL needs the collectives of the communicators of one GPU in
// the same order on every rank that shares them, and only the world's negotiation gives one
// order to all ranks. Each is ready when the set's members have submitted it; ranks outside
// the set drop it from their work list and run the rest in the same order, and the set's own
// communicator for GPU work (a second one, since the set's lane thread uses the first) runs
// it on the world's lane thread, one collective at a time. A plane is created by the first
// GPU group that needs it, collectively, and lives until shutdown, also for a set removed
// meanwhile, so that a GPU collective of it still pending on the world's lane can run on
// every member alike.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/gpu_plane.h"
#include "controller.h"
#include "executor.h"
#include "group.h"
#include "timeline.h"

namespace kerashvd {

class DeviceRouter {
 public:
  // `world`: the world's group, which the world's GPU plane is created over; it outlives the
  // router.
  DeviceRouter(Group* world, Timeline* timeline) : world_(world), timeline_(timeline) {}
  // A GPU tensor must be on the GPU of this process's earlier GPU tensors (checked locally,
  // before negotiation, so that a misplaced tensor never leaves the other ranks waiting).
  Status CheckDevice(const Request& request);
  // Set `id`'s group for its GPU collectives (members only, builds with a GPU plane).
  void AddSet(int id, std::unique_ptr<Group> gpu_group);
  // The executor for a group of the world lane: `host`, or a GPU plane's.
  Status ExecutorFor(const std::vector<WorkItem*>& group, Executor* host, Executor** out);
  // At shutdown: drops the sets' planes and communicators (the world's stays to the end).
  void DropSets();

 private:
  struct SetPlane {
    std::unique_ptr<Group> group;    // declared first: the plane uses it
    std::unique_ptr<GpuPlane> plane;
  };
  Group* world_;
  Timeline* timeline_;
  std::unique_ptr<GpuPlane> gpu_;    // the world's; created by the first GPU group
  std::atomic<int> gpu_device_{-1};  // the GPU of the first GPU tensor submitted
  std::mutex mutex_;                 // guards sets_ (registrations vs. the world lane)
  std::map<int, std::shared_ptr<SetPlane>> sets_;
};

}  // namespace kerashvd
