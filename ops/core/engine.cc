#include "engine.h"

#include <sstream>

#include "backend/mpi/mpi_group.h"
#include "backend/mpi/mpi_transport.h"

namespace kerashvd {
namespace {

std::vector<int> AllRanks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

}  // namespace

Status Engine::Create(const Config& config, std::unique_ptr<Engine>* out) {
  std::unique_ptr<Engine> engine(new Engine(config));
  Engine* e = engine.get();
  KERASHVD_RETURN_IF_ERROR(MpiContext::Create(&e->mpi_));
  e->topology_ = e->mpi_->topology();
  std::unique_ptr<Group> registry_group;
  KERASHVD_RETURN_IF_ERROR(MpiGroup::Duplicate(
      *e->mpi_, BackstopTimeout(config.peer_timeout_seconds), &e->abort_, &registry_group));
  ProcessSetRegistry::Host* host = e;  // a private base: only the engine hands itself out
  e->registry_ = std::make_unique<ProcessSetRegistry>(std::move(registry_group), &e->abort_, host);
  e->router_ = std::make_unique<DeviceRouter>(e->mpi_.get(), &e->abort_, &e->timeline_);
  e->world_ = std::make_unique<Lane>(
      0, MakeMpiTransport(e->mpi_.get(), config, &e->abort_, "", 0), AllRanks(e->mpi_->size()),
      config, &e->abort_, &e->timeline_,
      [e](int id, int rank) { return e->registry_->IsMember(id, rank); });
  e->world_->set_executor_chooser(
      [e](const std::vector<WorkItem*>& group, Executor* host, Executor** out) {
        return e->router_->ExecutorFor(group, host, out);
      });
  if (!config.timeline_path.empty())
    KERASHVD_RETURN_IF_ERROR(e->StartTimeline(config.timeline_path, config.timeline_max_bytes));
  const bool single_host = e->mpi_->local_size() == e->mpi_->size();
  e->monitor_ = std::make_unique<PeerMonitor>(
      e->world_->control(), config.peer_timeout_seconds, single_host, &e->abort_,
      [e](int rank, const std::string& what) { e->OnPeerFailure(rank, what); });
  KERASHVD_RETURN_IF_ERROR(e->monitor_->Start());
  e->world_->Start();
  *out = std::move(engine);
  return Status::Ok();
}

Engine::~Engine() {
  Shutdown();
  timeline_.Stop();
}

Status Engine::StartTimeline(const std::string& path, int64_t max_bytes) {
  std::string resolved = path;
  const std::string marker = "{rank}";
  size_t at = resolved.find(marker);
  if (at == std::string::npos) {
    if (topology_.rank != 0) return Status::Ok();
  } else {
    resolved.replace(at, marker.size(), std::to_string(topology_.rank));
  }
  return timeline_.Start(resolved, topology_.rank, max_bytes);
}

Status Engine::Submit(TensorEntry entry) {
  if (entry.process_set == 0) {
    if (entry.request.device >= 0) KERASHVD_RETURN_IF_ERROR(router_->CheckDevice(entry.request));
    return world_->Submit(std::move(entry));
  }
  const int id = entry.process_set;
  KERASHVD_RETURN_IF_ERROR(registry_->CheckCaller(id, entry.request.name));
  if (entry.request.device >= 0) {
    // A GPU collective of the set goes to the world's lane (device_router.h), under a name
    // that cannot be taken by a collective of the world or of another set.
    KERASHVD_RETURN_IF_ERROR(router_->CheckDevice(entry.request));
    entry.request.process_set = id;
    entry.request.name = "process_set." + std::to_string(id) + "/" + entry.request.name;
    return world_->Submit(std::move(entry));
  }
  std::shared_ptr<SetLane> set;
  {
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    auto it = set_lanes_.find(id);
    if (it != set_lanes_.end()) set = it->second;
  }
  if (!set)  // removed since CheckCaller
    return registry_->CheckCaller(id, entry.request.name);
  return set->lane->Submit(std::move(entry));
}

Status Engine::StartSet(int id, const std::vector<int>& ranks, std::unique_ptr<Group> group) {
  auto set = std::make_shared<SetLane>();
  std::unique_ptr<MpiContext> gpu_comm;
  KERASHVD_RETURN_IF_ERROR(MpiGroup::ToContexts(std::move(group), &set->comm,
                                                GpuPlaneBuilt() ? &gpu_comm : nullptr));
  if (gpu_comm) router_->AddSet(id, std::move(gpu_comm));
  set->lane = std::make_unique<Lane>(
      id, MakeMpiTransport(set->comm.get(), config_, &abort_,
                           "process set " + std::to_string(id) + ": ", ranks[0]),
      ranks, config_, &abort_, &timeline_);
  set->lane->Start();
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  set_lanes_[id] = std::move(set);
  return Status::Ok();
}

void Engine::StopSets(const std::vector<int>& ids) {
  std::vector<std::shared_ptr<SetLane>> gone;
  {
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    for (int id : ids) {
      auto it = set_lanes_.find(id);
      if (it == set_lanes_.end()) continue;
      gone.push_back(it->second);
      set_lanes_.erase(it);
    }
  }
  // The members stop each lane together (its shutdown is negotiated like a collective).
  for (auto& set : gone) {
    set->lane->RequestShutdown();
    set->lane->Join();
  }
}

void Engine::Shutdown() {
  if (world_) {
    world_->RequestShutdown();
    world_->Join();
  }
  std::map<int, std::shared_ptr<SetLane>> sets;
  {
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    sets.swap(set_lanes_);
  }
  for (auto& [id, set] : sets) set->lane->RequestShutdown();
  for (auto& [id, set] : sets) set->lane->Join();
  if (registry_) registry_->Clear();
  if (router_) router_->DropSets();
  if (monitor_) monitor_->Stop();
}

void Engine::OnPeerFailure(int rank, const std::string& what) {
  std::ostringstream msg;
  msg << "kerashvd rank " << topology_.rank << ": rank " << rank << " " << what
      << ". Collectives on this rank fail from now on and the job cannot continue; check rank "
      << rank << "'s output for the cause.";
  MarkMpiBroken();
  abort_.Set(Status::Aborted(msg.str()));
  world_->Wake();
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  for (auto& [id, set] : set_lanes_) set->lane->Wake();
}

}  // namespace kerashvd
