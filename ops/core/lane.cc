#include "lane.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <pthread.h>
#include <sstream>

#include "fusion.h"
#include "logging.h"

namespace kerashvd {

Lane::Lane(int id, LaneTransport transport, std::vector<int> world_ranks, const Config& config,
           AbortFlag* abort, Timeline* timeline, WorldParts world)
    : id_(id),
      world_ranks_(std::move(world_ranks)),
      config_(config),
      abort_(abort),
      timeline_(timeline),
      huge_pages_(std::move(transport.huge_pages)),
      control_(std::move(transport.control)),
      host_memory_(config.huge_pages),
      router_(world.router),
      fusion_threshold_(config.fusion_threshold_bytes),
      idle_(static_cast<int64_t>(config.cycle_time_ms * 1000)) {
  auto timed = std::make_unique<TimedBackend>(std::move(transport.backend), &stats_);
  timed_backend_ = timed.get();
  backend_ = std::move(timed);
  control_->set_idler([this](std::chrono::microseconds nap) {
    // With a collective pending here, the peers are expected soon: nap briefly, so that the
    // cycle completes within ~kPendingNap of the last rank's arrival instead of up to the
    // wait loop's longest nap (1 ms).
    if (pending_work_) nap = std::min(nap, kPendingNap);
    if (!queue_.WaitForSubmissionAfter(seen_submissions_, nap)) return false;
    seen_submissions_ = queue_.submissions();
    pending_work_ = true;  // taken by the next cycle, which this one now holds up
    return true;
  });
  control_->set_urgency([this] { return pending_work_; });
  Membership membership;
  if (const ProcessSetRegistry* sets = world.sets)
    membership = [sets](int set, int rank) { return sets->IsMember(set, rank); };
  controller_ = std::make_unique<Controller>(control_.get(), config, world_ranks_,
                                             std::move(membership));
  executor_ = std::make_unique<Executor>(
      backend_.get(), &host_memory_, timeline_, control_->rank(), control_->size(),
      id_ == 0 ? "" : "process_set." + std::to_string(id_) + "/");
}

Lane::~Lane() {
  RequestShutdown();
  Join();
}

Status Lane::EnableAutotune(const std::string& log_path) {
  KERASHVD_RETURN_IF_ERROR(AutotuneLog::Open(log_path, world_ranks_[control_->rank()], &tune_log_));
  autotune_ = true;
  trial_settings_ = {config_.fusion_threshold_bytes, config_.cycle_time_ms};
  if (control_->rank() == 0) tuner_ = std::make_unique<Tuner>(config_, Tuner::Clock::now());
  return Status::Ok();
}

void Lane::ApplyTune(const TuneDecision& decision) {
  trial_scores_.push_back(decision.ended_score);
  tune_log_.Trial(trial_, trial_start_cycle_, trial_settings_, decision.ended_score, false);
  if (decision.final) {
    const double score = static_cast<size_t>(decision.trial) < trial_scores_.size()
                             ? trial_scores_[decision.trial] : 0.0;
    tune_log_.Trial(decision.trial, cycles_, decision.settings, score, true);
    if (control_->rank() == 0) {
      std::ostringstream msg;
      msg << "autotune chose fusion threshold " << decision.settings.fusion_threshold_bytes
          << " bytes and cycle time " << decision.settings.cycle_time_ms << " ms (trial "
          << decision.trial << " of " << trial_scores_.size() << ", "
          << score / (1 << 20) << " MiB/s)";
      LogInfo(world_ranks_[0], msg.str());
    }
  }
  trial_ = decision.trial;
  trial_start_cycle_ = cycles_;
  trial_settings_ = decision.settings;
  fusion_threshold_ = decision.settings.fusion_threshold_bytes;
  idle_ = std::chrono::microseconds(static_cast<int64_t>(decision.settings.cycle_time_ms * 1000));
  if (tuner_) tuner_->Applied(Tuner::Clock::now());
}

void Lane::Start() {
  thread_ = std::thread([this] { Loop(); });
  // Named, so that tools (top -H, ps -L, a cgroup for one thread) can find it: "khvd-lane<id>"
  // (the kernel keeps 15 characters).
  const std::string name = ("khvd-lane" + std::to_string(id_)).substr(0, 15);
  pthread_setname_np(thread_.native_handle(), name.c_str());
}

Status Lane::Submit(TensorEntry entry) {
  // Held while queueing, so that an entry queued here is always seen by Stop's final drain.
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (stopped_) return stop_reason_;
  // What the executor's single-tensor path will do with this entry (see Executor::Allreduce).
  const Request& r = entry.request;
  entry.request.out_of_place = r.op_type == OpType::kAllreduce && r.shapes.size() == 1 &&
                               WireType(r.dtype, r.reduce_op) == r.dtype && r.prescale == 1.0 &&
                               entry.outputs.size() == 1 && entry.inputs.size() == 1 &&
                               entry.outputs[0] != entry.inputs[0];
  entry.submitted = std::chrono::steady_clock::now();
  queue_.Submit(std::move(entry));
  return Status::Ok();
}

void Lane::RequestShutdown() {
  shutdown_requested_ = true;
  queue_.Wake();
}

void Lane::Join() {
  if (thread_.joinable()) thread_.join();
}

std::string Lane::ShutdownMessage(const std::vector<int>& ranks) const {
  std::ostringstream msg;
  if (id_ == 0) msg << "kerashvd was shut down by rank(s)";
  else msg << "kerashvd's process set " << id_ << " was shut down by rank(s)";
  for (int r : ranks) msg << " " << world_ranks_[r];
  msg << (id_ == 0 ? " (kerashvd.shutdown() was called, or the process exited)"
                   : " (kerashvd.shutdown() or remove_process_set() was called)")
      << " while this collective was pending on rank " << world_ranks_[control_->rank()]
      << ". Every rank must run the same collectives before shutting down.";
  return msg.str();
}

Status Lane::AgreeSettings() {
  const int64_t carry = id_ == 0 ? std::min(config_.carry_bytes, kCarryMaxBytes) : 0;
  const int64_t mine[3] = {fusion_threshold_, carry,
                           static_cast<int64_t>(config_.hierarchical_allreduce)};
  std::string bytes(reinterpret_cast<const char*>(mine), sizeof(mine));
  KERASHVD_RETURN_IF_ERROR(control_->BroadcastFromRoot(&bytes));
  int64_t agreed[3];
  if (bytes.size() != sizeof(agreed)) return Status::Internal("settings of rank 0 garbled");
  std::memcpy(agreed, bytes.data(), sizeof(agreed));
  if (agreed[0] != mine[0] || agreed[1] != mine[1])
    LogWarning(world_ranks_[control_->rank()],
               "fusion_threshold_bytes/carry_bytes are " + std::to_string(mine[0]) + "/" +
                   std::to_string(mine[1]) + " on this rank but " + std::to_string(agreed[0]) +
                   "/" + std::to_string(agreed[1]) + " on rank " + std::to_string(world_ranks_[0]) +
                   ": every rank follows rank " + std::to_string(world_ranks_[0]) +
                   ". Set them alike on every rank");
  fusion_threshold_ = agreed[0];
  // Node by node forced on reduces small allreduces otherwise than a carried one would.
  const bool node_by_node = agreed[2] == static_cast<int64_t>(Hierarchical::kOn);
  controller_->set_carry_bytes(node_by_node ? 0 : agreed[1]);
  return Status::Ok();
}

Status Lane::Execute(CycleResult& cycle, int64_t* bytes) {
  // Carried allreduces first: they need no communication, and must not be fused.
  auto rest = std::stable_partition(cycle.work.begin(), cycle.work.end(),
                                    [](const WorkItem& item) { return item.carried.empty(); });
  for (auto it = rest; it != cycle.work.end(); ++it) {
    std::vector<WorkItem*> group{&*it};
    *bytes += FusedBytes(it->response.request);
    RunTimed(executor_.get(), group);
  }
  cycle.work.erase(rest, cycle.work.end());
  Status failed;
  for (std::vector<size_t>& indices : PlanFusion(cycle.work, fusion_threshold_)) {
    std::vector<WorkItem*> group;
    for (size_t i : indices) {
      group.push_back(&cycle.work[i]);
      *bytes += FusedBytes(cycle.work[i].response.request);
    }
    if (group.size() == 1 && controller_->ReducesAlone(*group[0])) {
      const auto start = Timeline::Clock::now();
      Status reduced = failed.ok() ? controller_->ReduceAlone(*group[0]) : failed;
      if (!reduced.ok()) {
        failed = reduced;
        Executor::Fail(group, reduced);
        continue;
      }
      if (timeline_->active())
        timeline_->Phase(group[0]->response.request.name, "ALLREDUCE", start,
                         Timeline::Clock::now());
    }
    Executor* executor = executor_.get();
    Status placed = router_ ? router_->ExecutorFor(group, executor_.get(), &executor)
                            : Status::Ok();
    if (placed.ok()) RunTimed(executor, group);
    else Executor::Fail(group, placed);
  }
  return failed;
}

void Lane::Loop() {
  Status agreed = AgreeSettings();
  if (!agreed.ok()) return Stop(agreed);
  auto wait = idle_;
  const auto linger =
      std::chrono::microseconds(static_cast<int64_t>(config_.linger_ms * 1000));
  bool worked = false;  // the last cycle ran collectives
  while (true) {
    if (worked && linger.count() > 0) queue_.SpinForWork(linger);
    queue_.WaitForWork(wait);
    if (abort_->is_set()) return Stop(abort_->status());
    seen_submissions_ = queue_.submissions();
    CycleResult cycle;
    std::deque<TensorEntry> incoming = queue_.TakeAll();
    pending_work_ = !incoming.empty() || controller_->has_pending() || controller_->joined();
    const bool had_work = pending_work_;
    const auto cycle_start = Timeline::Clock::now();
    Status status = controller_->RunCycle(std::move(incoming), shutdown_requested_, &cycle);
    if (!status.ok()) return Stop(status);
    const WaitCounters waits = control_->TakeWaitCounters();
    if (timeline_->active()) {
      for (WorkItem& item : cycle.work) item.cycle_start = cycle_start;
      if (had_work)
        timeline_->Engine("NEGOTIATION", cycle_start, Timeline::Clock::now(),
                          "\"tensors\": " + std::to_string(cycle.work.size()) +
                              ", \"waits\": " + std::to_string(waits.waits) +
                              ", \"polls\": " + std::to_string(waits.polls) +
                              ", \"naps\": " + std::to_string(waits.naps) +
                              ", \"napped_us\": " + std::to_string(waits.napped.count()));
    }
    if (cycle.shutdown) return Stop(Status::Aborted(ShutdownMessage(cycle.shutdown_ranks)));
    if (!cycle.fatal_error.empty()) return Stop(Status::Aborted(cycle.fatal_error));
    ++cycles_;
    if (cycle.tune && autotune_) ApplyTune(*cycle.tune);
    // With work of its own still waiting for peers, meet them again almost at once: the cycle
    // that finds everything ready then starts within ~kPendingNap of the last submission.
    // Otherwise back off, whatever the other ranks have pending: they can only be waiting for
    // a submission of this rank, and that wakes the loop at once.
    wait = controller_->has_pending() || controller_->joined() || cycle.set_work_pending
               ? std::min<std::chrono::microseconds>(idle_, kPendingNap) : idle_;

    const auto executed = Timeline::Clock::now();
    int64_t bytes = 0;
    worked = !cycle.work.empty();
    const size_t tensors = cycle.work.size();
    Status ran = Execute(cycle, &bytes);
    if (!ran.ok()) return Stop(ran);
    if (worked) timeline_->Cycle(executed, Timeline::Clock::now(), tensors, bytes);
    if (tuner_ && bytes > 0) {
      if (std::optional<TuneDecision> next = tuner_->Observe(bytes, Tuner::Clock::now()))
        controller_->ProposeTune(*next);
    }
  }
}

void Lane::RunTimed(Executor* executor, std::vector<WorkItem*>& group) {
  using Clock = StragglerStats::Clock;
  timed_backend_->StartGroup();
  executor->Run(group);
  const Clock::time_point none;
  // The GPU plane's calls are not timed: its groups end with Run, and have no entry lag.
  const bool timed = executor == executor_.get() && timed_backend_->first_start() != none;
  // A collective's wait ends with its data transfer, which ends on every rank together;
  // copying out and completing the ops come after, at this rank's own pace.
  const Clock::time_point finished = Clock::now();
  const Clock::time_point end = timed ? timed_backend_->last_end() : finished;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto Seconds = [](Clock::duration d) { return std::chrono::duration<float>(d).count(); };
  bool first = true;
  for (WorkItem* item : group) {
    if (!CountsForStragglers(item->response.request) ||
        item->response.kind == Response::Kind::kJoinDone)
      continue;
    const bool lags = first && timed;
    const float lag = lags ? Seconds(timed_backend_->first_start() - item->ready) : nan;
    const float completion = lags ? Seconds(finished - end) : nan;
    const float wait = item->entry ? Seconds(end - item->entry->submitted) : nan;
    stats_.Completed(wait, lag, completion, end);
    first = false;
  }
}

void Lane::Stop(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopped_ = true;
    stop_reason_ = reason;
  }
  for (TensorEntry& entry : controller_->TakePending()) entry.done(reason, CollectiveResult());
  for (TensorEntry& entry : queue_.TakeAll()) entry.done(reason, CollectiveResult());
}

}  // namespace kerashvd
