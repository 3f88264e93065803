#include "set_lanes.h"

namespace kerashvd {

Status SetLanes::StartSet(int id, const std::vector<int>& ranks, std::unique_ptr<Group> group) {
  if (GpuPlaneBuilt()) {
    std::unique_ptr<Group> gpu_group;
    KERASHVD_RETURN_IF_ERROR(group->Duplicate(&gpu_group));
    router_->AddSet(id, std::move(gpu_group));
  }
  auto set = std::make_shared<SetLane>();
  set->group = std::move(group);
  set->lane = std::make_unique<Lane>(
      id, set->group->MakeLaneTransport(config_, "process set " + std::to_string(id) + ": ",
                                        ranks[0]),
      ranks, config_, abort_, timeline_);
  set->lane->Start();
  std::lock_guard<std::mutex> lock(mutex_);
  lanes_[id] = std::move(set);
  return Status::Ok();
}

std::shared_ptr<Lane> SetLanes::Find(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = lanes_.find(id);
  if (it == lanes_.end()) return nullptr;
  return std::shared_ptr<Lane>(it->second, it->second->lane.get());  // holds the group too
}

std::vector<std::shared_ptr<Lane>> SetLanes::All() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<Lane>> out;
  for (auto& [id, set] : lanes_) out.push_back(std::shared_ptr<Lane>(set, set->lane.get()));
  return out;
}

void SetLanes::StopSets(const std::vector<int>& ids) {
  std::vector<std::shared_ptr<SetLane>> gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int id : ids) {
      auto it = lanes_.find(id);
      if (it == lanes_.end()) continue;
      gone.push_back(it->second);
      lanes_.erase(it);
    }
  }
  Stop(std::move(gone));
}

void SetLanes::StopAll() {
  std::vector<std::shared_ptr<SetLane>> gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, set] : lanes_) gone.push_back(set);
    lanes_.clear();
  }
  Stop(std::move(gone));
}

void SetLanes::Stop(std::vector<std::shared_ptr<SetLane>> sets) {
  // The members stop each lane together (its shutdown is negotiated like a collective).
  for (auto& set : sets) set->lane->RequestShutdown();
  for (auto& set : sets) set->lane->Join();
}

void SetLanes::WakeAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, set] : lanes_) set->lane->Wake();
}

}  // namespace kerashvd
