#include "engine.h"

#include <algorithm>
#include <sstream>


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
  KERASHVD_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_dup(e->mpi_->comm(), &e->registry_comm_), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(e->registry_comm_, MPI_ERRORS_RETURN);
  e->world_ = std::make_unique<Lane>(0, e->mpi_.get(), AllRanks(e->mpi_->size()), config,
                                     &e->abort_, &e->timeline_,
                                     [e](int id, int rank) { return e->IsMember(id, rank); });
  e->world_->set_executor_chooser(
      [e](const std::vector<WorkItem*>& group, Executor* host, Executor** out) {
        return e->ExecutorFor(group, host, out);
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
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (registry_comm_ != MPI_COMM_NULL && !finalized && !MpiBroken()) MPI_Comm_free(&registry_comm_);
}

Status Engine::StartTimeline(const std::string& path, int64_t max_bytes) {
  std::string resolved = path;
  const std::string marker = "{rank}";
  size_t at = resolved.find(marker);
  if (at == std::string::npos) {
    if (mpi_->rank() != 0) return Status::Ok();
  } else {
    resolved.replace(at, marker.size(), std::to_string(mpi_->rank()));
  }
  return timeline_.Start(resolved, mpi_->rank(), max_bytes);
}

Status Engine::Submit(TensorEntry entry) {
  if (entry.process_set == 0) {
    if (entry.request.device >= 0) KERASHVD_RETURN_IF_ERROR(CheckDevice(entry.request));
    return world_->Submit(std::move(entry));
  }
  std::shared_ptr<SetEntry> set;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(entry.process_set);
    if (it != sets_.end()) set = it->second;
  }
  const std::string& name = entry.request.name;
  if (!set)
    return Status::InvalidArgument("collective '" + name + "' names process set " +
                                   std::to_string(entry.process_set) +
                                   ", which is not registered (or was removed). Register it "
                                   "with kerashvd.add_process_set() or init(process_sets=...).");
  if (!set->lane)
    return Status::InvalidArgument(
        "rank " + std::to_string(mpi_->rank()) + " called collective '" + name +
        "' on process set " + std::to_string(entry.process_set) + " with ranks " +
        RankList(set->ranks) + ", which does not include it. Only members of a process set "
        "may call its collectives (check process_set.included()).");
  if (entry.request.device < 0) return set->lane->Submit(std::move(entry));
  // A GPU collective of the set goes to the world's lane (see the file comment of engine.h),
  // under a name that cannot be taken by a collective of the world or of another set.
  KERASHVD_RETURN_IF_ERROR(CheckDevice(entry.request));
  entry.request.process_set = entry.process_set;
  entry.request.name = "process_set." + std::to_string(entry.process_set) + "/" + name;
  return world_->Submit(std::move(entry));
}

Status Engine::CheckDevice(const Request& request) {
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

void Engine::Shutdown() {
  if (world_) {
    world_->RequestShutdown();
    world_->Join();
  }
  std::map<int, std::shared_ptr<SetEntry>> sets;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    sets.swap(sets_);
  }
  for (auto& [id, set] : sets)
    if (set->lane) set->lane->RequestShutdown();
  for (auto& [id, set] : sets)
    if (set->lane) set->lane->Join();
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    retired_.clear();
  }
  if (monitor_) monitor_->Stop();
}

void Engine::OnPeerFailure(int rank, const std::string& what) {
  std::ostringstream msg;
  msg << "kerashvd rank " << mpi_->rank() << ": rank " << rank << " " << what
      << ". Collectives on this rank fail from now on and the job cannot continue; check rank "
      << rank << "'s output for the cause.";
  MarkMpiBroken();
  abort_.Set(Status::Aborted(msg.str()));
  world_->Wake();
  std::lock_guard<std::mutex> lock(sets_mutex_);
  for (auto& [id, set] : sets_)
    if (set->lane) set->lane->Wake();
}

bool Engine::IsMember(int id, int rank) const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  auto it = members_.find(id);
  return it != members_.end() && std::binary_search(it->second.begin(), it->second.end(), rank);
}

Status Engine::ExecutorFor(const std::vector<WorkItem*>& group, Executor* host, Executor** out) {
  const Response& response = group.front()->response;
  if (response.kind != Response::Kind::kExecute || response.request.device < 0) {
    *out = host;
    return Status::Ok();
  }
  // This rank's own tensors say which GPU; a rank that has joined has none here and lets the
  // plane choose (local rank modulo the visible GPUs).
  // Submit has made sure that all of this rank's GPU tensors are on one device.
  int device = gpu_device_.load();
  for (const WorkItem* item : group)
    if (item->entry) device = item->entry->request.device;
  const int id = response.request.process_set;
  if (id == 0) {
    if (!gpu_)
      KERASHVD_RETURN_IF_ERROR(
          CreateGpuPlane(*mpi_, &abort_, &timeline_, device, /*timeout_seconds=*/0, &gpu_));
    *out = gpu_->executor();
    return Status::Ok();
  }
  // A set's group: only its members get here, each at the same place in the work list.
  // A set removed meanwhile is among the retired ones, with its communicators.
  std::shared_ptr<SetEntry> set;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(id);
    if (it != sets_.end()) set = it->second;
    for (const auto& retired : retired_)
      if (!set && retired->id == id) set = retired;
  }
  if (!set || !set->gpu_comm)
    return Status::Internal("process set " + std::to_string(id) + " has no GPU communicator "
                            "on this rank for '" + response.request.name + "'");
  if (!set->gpu)
    KERASHVD_RETURN_IF_ERROR(CreateGpuPlane(*set->gpu_comm, &abort_, &timeline_, device,
                                            /*timeout_seconds=*/0, &set->gpu));
  *out = set->gpu->executor();
  return Status::Ok();
}

Status Engine::ProcessSet(int id, ProcessSetView* view) const {
  view->id = id;
  if (id == 0) {  // called for every collective: no per-call list of all ranks
    view->size = mpi_->size();
    view->rank = mpi_->rank();
    view->ranks.clear();
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(sets_mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end())
    return Status::InvalidArgument("process set " + std::to_string(id) +
                                   " is not registered (or was removed)");
  view->ranks = it->second->ranks;
  view->size = static_cast<int>(view->ranks.size());
  auto at = std::find(view->ranks.begin(), view->ranks.end(), mpi_->rank());
  view->rank = at == view->ranks.end() ? -1 : static_cast<int>(at - view->ranks.begin());
  return Status::Ok();
}

std::vector<int> Engine::ProcessSetIds() const {
  std::vector<int> ids{0};
  std::lock_guard<std::mutex> lock(sets_mutex_);
  for (const auto& [id, set] : sets_) ids.push_back(id);
  return ids;
}

}  // namespace kerashvd
