#include "engine.h"

#include <mutex>
#include <sstream>

namespace kerashvd {

Status Engine::Create(const Config& config, const WorldFactory& make_world,
                      std::unique_ptr<Engine>* out) {
  std::unique_ptr<Engine> engine(new Engine(config));
  Engine* e = engine.get();
  KERASHVD_RETURN_IF_ERROR(make_world(config, &e->abort_, &e->world_group_));
  e->topology_ = e->world_group_->topology();
  e->router_ = std::make_unique<DeviceRouter>(e->world_group_.get(), &e->timeline_);
  e->set_lanes_ = std::make_unique<SetLanes>(config, &e->abort_, &e->timeline_, e->router_.get());
  std::unique_ptr<Group> registry_group;  // the registry's traffic apart from the lanes'
  KERASHVD_RETURN_IF_ERROR(e->world_group_->Duplicate(&registry_group));
  e->registry_ = std::make_unique<ProcessSetRegistry>(std::move(registry_group), &e->abort_,
                                                      e->set_lanes_.get());
  std::vector<int> ranks(e->topology_.size);
  for (int r = 0; r < e->topology_.size; ++r) ranks[r] = r;
  e->world_ = std::make_unique<Lane>(0, e->world_group_->MakeLaneTransport(config, "", 0), ranks,
                                     config, &e->abort_, &e->timeline_,
                                     Lane::WorldParts{e->registry_.get(), e->router_.get()});
  if (config.autotune) KERASHVD_RETURN_IF_ERROR(e->world_->EnableAutotune(config.autotune_log_path));
  if (!config.timeline_path.empty())
    KERASHVD_RETURN_IF_ERROR(e->StartTimeline(config.timeline_path, config.timeline_max_bytes));
  const bool single_host = e->topology_.local_size == e->topology_.size;
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
  if (entry.request.op_type == OpType::kJoin) return SubmitJoin(std::move(entry));
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
  std::shared_ptr<Lane> lane = set_lanes_->Find(id);
  if (!lane)  // removed since CheckCaller
    return registry_->CheckCaller(id, entry.request.name);
  return lane->Submit(std::move(entry));
}

Status Engine::SubmitJoin(TensorEntry entry) {
  // What the lanes' joins share: how many are still running, the first error, the world's
  // result, and the caller's callback, called once when the last one ends.
  struct Joins {
    std::mutex mutex;
    size_t running = 0;
    Status status;
    CollectiveResult world;
    std::function<void(const Status&, const CollectiveResult&)> done;
    void End(const Status& s, const CollectiveResult* world_result) {
      std::unique_lock<std::mutex> lock(mutex);
      if (status.ok() && !s.ok()) status = s;
      if (world_result) world = *world_result;
      if (--running > 0) return;
      lock.unlock();
      done(status, world);
    }
  };
  std::vector<std::shared_ptr<Lane>> sets = set_lanes_->All();
  auto joins = std::make_shared<Joins>();
  joins->running = 1 + sets.size();
  joins->done = std::move(entry.done);
  TensorEntry set_join;
  set_join.request = entry.request;
  entry.done = [joins](const Status& s, const CollectiveResult& r) { joins->End(s, &r); };
  KERASHVD_RETURN_IF_ERROR(world_->Submit(std::move(entry)));
  for (const std::shared_ptr<Lane>& lane : sets) {
    TensorEntry join = set_join;
    join.process_set = lane->id();
    join.done = [joins](const Status& s, const CollectiveResult&) { joins->End(s, nullptr); };
    Status submitted = lane->Submit(std::move(join));
    if (!submitted.ok()) joins->End(submitted, nullptr);
  }
  return Status::Ok();
}

void Engine::Shutdown() {
  if (world_) {
    world_->RequestShutdown();
    world_->Join();
  }
  if (set_lanes_) set_lanes_->StopAll();
  if (registry_) registry_->Clear();
  if (router_) router_->DropSets();
  if (monitor_) monitor_->Stop();
}

void Engine::OnPeerFailure(int rank, const std::string& what) {
  std::ostringstream msg;
  msg << "kerashvd rank " << topology_.rank << ": rank " << rank << " " << what
      << ". Collectives on this rank fail from now on and the job cannot continue; check rank "
      << rank << "'s output for the cause.";
  world_group_->MarkBroken();
  abort_.Set(Status::Aborted(msg.str()));
  world_->Wake();
  set_lanes_->WakeAll();
}

}  // namespace kerashvd
