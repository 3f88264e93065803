#include "device_router.h"

namespace kerashvd {

Status DeviceRouter::CheckDevice(const Request& request) {
  if (!GpuPlaneBuilt())
    return Status::Unimplemented(
        "this kerashvd build has no GPU backend (built without NCCL); place the tensor on the "
        "CPU or rebuild with -DKERASHVD_WITH_NCCL=ON");
  int expected = -1;
  if (gpu_device_.compare_exchange_strong(expected, request.device) || expected == request.device)
    return Status::Ok();
  return Status::InvalidArgument(
      "kerashvd drives one GPU per process: tensor '" + request.name + "' is on GPU " +
      std::to_string(request.device) + ", but this process's GPU collectives run on GPU " +
      std::to_string(expected) +
      ". Place every tensor a process reduces on the same GPU (one process per GPU, e.g. "
      "CUDA_VISIBLE_DEVICES=local rank).");
}

void DeviceRouter::AddSet(int id, std::unique_ptr<Group> gpu_group) {
  auto set = std::make_shared<SetPlane>();
  set->group = std::move(gpu_group);
  std::lock_guard<std::mutex> lock(mutex_);
  sets_[id] = std::move(set);
}

void DeviceRouter::DropSets() {
  std::map<int, std::shared_ptr<SetPlane>> sets;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sets.swap(sets_);
  }
}

Status DeviceRouter::ExecutorFor(const std::vector<WorkItem*>& group, Executor* host,
                                 Executor** out) {
  const Response& response = group.front()->response;
  if (response.kind != Response::Kind::kExecute || response.request.device < 0) {
    *out = host;
    return Status::Ok();
  }
  // This rank's own tensors say which GPU; a rank that has joined has none here and lets the
  // plane choose (local rank modulo the visible GPUs).
  // CheckDevice has made sure that all of this rank's GPU tensors are on one device.
  int device = gpu_device_.load();
  for (const WorkItem* item : group)
    if (item->entry) device = item->entry->request.device;
  const int id = response.request.process_set;
  if (id == 0) {
    if (!gpu_)
      KERASHVD_RETURN_IF_ERROR(
          world_->CreateGpuPlane(timeline_, device, /*timeout_seconds=*/0, &gpu_));
    *out = gpu_->executor();
    return Status::Ok();
  }
  // A set's group: only its members get here, each at the same place in the work list.
  std::shared_ptr<SetPlane> set;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sets_.find(id);
    if (it != sets_.end()) set = it->second;
  }
  if (!set || !set->group)
    return Status::Internal("process set " + std::to_string(id) + " has no GPU communicator "
                            "on this rank for '" + response.request.name + "'");
  if (!set->plane)
    KERASHVD_RETURN_IF_ERROR(
        set->group->CreateGpuPlane(timeline_, device, /*timeout_seconds=*/0, &set->plane));
  *out = set->plane->executor();
  return Status::Ok();
}

}  // namespace kerashvd
