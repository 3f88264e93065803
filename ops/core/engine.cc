#include "engine.h"

#include "backend/mpi/mpi_backend.h"
#include "backend/mpi/mpi_control_plane.h"
#include "fusion.h"

#include <algorithm>
#include <sstream>

namespace kerashvd {

Status Engine::Create(const Config& config, std::unique_ptr<Engine>* out) {
  std::unique_ptr<Engine> engine(new Engine(config));
  KERASHVD_RETURN_IF_ERROR(MpiContext::Create(&engine->mpi_));
  engine->control_ = std::make_unique<MpiControlPlane>(engine->mpi_.get(), config.peer_timeout_seconds,
                                                       &engine->abort_);
  engine->huge_pages_ = HugePages(config.huge_pages);
  engine->cpu_backend_ = std::make_unique<MpiBackend>(engine->mpi_.get(), &engine->abort_,
                                                      &engine->huge_pages_);
  engine->control_->set_idler([e = engine.get()](std::chrono::microseconds nap) {
    // With a collective pending here, the peers are expected soon: nap briefly, so that the
    // cycle completes within ~kPendingNap of the last rank's arrival instead of up to the
    // wait loop's longest nap (1 ms).
    if (e->pending_work_) nap = std::min(nap, kPendingNap);
    if (!e->queue_.WaitForSubmissionAfter(e->seen_submissions_, nap)) return false;
    e->seen_submissions_ = e->queue_.submissions();
    e->pending_work_ = true;  // taken by the next cycle, which this one now holds up
    return true;
  });
  engine->control_->set_urgency([e = engine.get()] { return e->pending_work_; });
  engine->controller_ = std::make_unique<Controller>(engine->control_.get(), config);
  engine->executor_ = std::make_unique<Executor>(engine->cpu_backend_.get(), &engine->host_memory_,
                                                 &engine->timeline_, engine->mpi_->rank(),
                                                 engine->mpi_->size());
  if (!config.timeline_path.empty()) {
    Status status = engine->StartTimeline(config.timeline_path, config.timeline_max_bytes);
    if (!status.ok()) return status;
  }
  const bool single_host = engine->mpi_->local_size() == engine->mpi_->size();
  engine->monitor_ = std::make_unique<PeerMonitor>(
      engine->control_.get(), config.peer_timeout_seconds, single_host,
      [e = engine.get()](int rank, const std::string& what) { e->OnPeerFailure(rank, what); });
  KERASHVD_RETURN_IF_ERROR(engine->monitor_->Start());
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
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
    if (mpi_->rank() != 0) return Status::Ok();
  } else {
    resolved.replace(at, marker.size(), std::to_string(mpi_->rank()));
  }
  return timeline_.Start(resolved, mpi_->rank(), max_bytes);
}

Status Engine::Submit(TensorEntry entry) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopped_) return stop_reason_;
  }
  if (entry.request.device >= 0) KERASHVD_RETURN_IF_ERROR(CheckDevice(entry.request));
  // What the executor's single-tensor path will do with this entry (see Executor::Allreduce).
  const Request& r = entry.request;
  entry.request.out_of_place = r.op_type == OpType::kAllreduce && r.shapes.size() == 1 &&
                               !IsHalf(r.dtype) && r.prescale == 1.0 &&
                               entry.outputs.size() == 1 && entry.inputs.size() == 1 &&
                               entry.outputs[0] != entry.inputs[0];
  entry.submitted = std::chrono::steady_clock::now();
  queue_.Submit(std::move(entry));
  return Status::Ok();
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
  shutdown_requested_ = true;
  queue_.Wake();
  if (thread_.joinable()) thread_.join();
  if (monitor_) monitor_->Stop();
}

void Engine::OnPeerFailure(int rank, const std::string& what) {
  std::ostringstream msg;
  msg << "kerashvd rank " << mpi_->rank() << ": rank " << rank << " " << what
      << ". Collectives on this rank fail from now on and the job cannot continue; check rank "
      << rank << "'s output for the cause.";
  MarkMpiBroken();
  abort_.Set(Status::Aborted(msg.str()));
  queue_.Wake();
}

void Engine::Loop() {
  const auto idle = std::chrono::microseconds(static_cast<int64_t>(config_.cycle_time_ms * 1000));
  const auto pending_wait = std::min<std::chrono::microseconds>(idle, kPendingNap);
  auto wait = idle;
  while (true) {
    queue_.WaitForWork(wait);
    if (abort_.is_set()) return Stop(abort_.status());
    seen_submissions_ = queue_.submissions();
    CycleResult cycle;
    std::deque<TensorEntry> incoming = queue_.TakeAll();
    pending_work_ = !incoming.empty() || controller_->has_pending() || controller_->joined();
    Status status = controller_->RunCycle(std::move(incoming), shutdown_requested_, &cycle);
    if (!status.ok()) return Stop(status);
    if (cycle.shutdown) {
      std::ostringstream msg;
      msg << "kerashvd was shut down by rank(s)";
      for (int r : cycle.shutdown_ranks) msg << " " << r;
      msg << " (kerashvd.shutdown() was called, or the process exited) while this collective "
             "was pending on rank "
          << mpi_->rank() << ". Every rank must run the same collectives before shutting down.";
      return Stop(Status::Aborted(msg.str()));
    }
    if (!cycle.fatal_error.empty()) return Stop(Status::Aborted(cycle.fatal_error));
    // With work of its own still waiting for peers, meet them again almost at once: the cycle
    // that finds everything ready then starts within ~kPendingNap of the last submission.
    // Otherwise back off, whatever the other ranks have pending: they can only be waiting for
    // a submission of this rank, and that wakes the loop at once.
    wait = controller_->has_pending() || controller_->joined() ? pending_wait : idle;

    const auto executed = Timeline::Clock::now();
    int64_t bytes = 0;
    for (std::vector<size_t>& indices : PlanFusion(cycle.work, config_.fusion_threshold_bytes)) {
      std::vector<WorkItem*> group;
      for (size_t i : indices) {
        group.push_back(&cycle.work[i]);
        bytes += FusedBytes(cycle.work[i].response.request);
      }
      Executor* executor = nullptr;
      Status placed = ExecutorFor(group, &executor);
      if (placed.ok()) executor->Run(group);
      else Executor::Fail(group, placed);
    }
    if (!cycle.work.empty()) timeline_.Cycle(executed, Timeline::Clock::now(), cycle.work.size(), bytes);
  }
}

Status Engine::ExecutorFor(const std::vector<WorkItem*>& group, Executor** out) {
  const Response& response = group.front()->response;
  if (response.kind != Response::Kind::kExecute || response.request.device < 0) {
    *out = executor_.get();
    return Status::Ok();
  }
  // This rank's own tensors say which GPU; a rank that has joined has none here and lets the
  // plane choose (local rank modulo the visible GPUs).
  // Submit has made sure that all of this rank's GPU tensors are on one device.
  if (!gpu_) {
    int device = -1;
    for (const WorkItem* item : group)
      if (item->entry) device = item->entry->request.device;
    KERASHVD_RETURN_IF_ERROR(
        CreateGpuPlane(*mpi_, &abort_, &timeline_, device, /*timeout_seconds=*/0, &gpu_));
  }
  *out = gpu_->executor();
  return Status::Ok();
}

void Engine::Stop(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopped_ = true;
    stop_reason_ = reason;
  }
  for (TensorEntry& entry : controller_->TakePending()) entry.done(reason, CollectiveResult());
  for (TensorEntry& entry : queue_.TakeAll()) entry.done(reason, CollectiveResult());
}

}  // namespace kerashvd
