#include "controller.h"

namespace kerashvd {
namespace {

enum Flag : uint64_t {
  kHasUncached = 1, kShutdown = 2, kCoordinatorBroadcast = 4, kSetWorkPending = 8
};

void SetBit(std::vector<uint64_t>& words, size_t offset, int32_t slot) {
  words[offset + slot / 64] |= uint64_t{1} << (slot % 64);
}

}  // namespace

Controller::Controller(ControlPlane* control, const Config& config, std::vector<int> world_ranks,
                       Membership membership)
    : control_(control), config_(config), world_ranks_(std::move(world_ranks)),
      membership_(std::move(membership)), cache_(config.cache_capacity) {
  if (control_->rank() == 0)
    coordinator_ = std::make_unique<Coordinator>(control_->size(), config_, &cache_, world_ranks_,
                                                 membership_);
}

void Controller::Intake(std::deque<TensorEntry>& incoming) {
  for (TensorEntry& entry : incoming) {
    entry.request.rank = control_->rank();
    const std::string& name = entry.request.name;
    if (pending_.count(name)) {
      entry.done(Status::InvalidArgument(
                     "A collective named '" + name + "' is already in flight on rank " +
                         std::to_string(world_ranks_[control_->rank()]) +
                         ". Concurrent collectives need distinct names: pass a unique name= "
                         "or wait for the first one to finish."),
                 CollectiveResult());
      continue;
    }
    if (entry.request.op_type == OpType::kJoin) join_pending_ = true;
    pending_.emplace(name, std::move(entry));
  }
}

Status Controller::RunCycle(std::deque<TensorEntry> incoming, bool shutdown_requested,
                            CycleResult* out) {
  Intake(incoming);
  const int32_t slots = cache_.num_slots();
  const size_t width = (slots + 63) / 64;

  // Step 2: bits for cached entries, full requests for the rest.
  const int world = control_->size();
  const size_t rank_words = (world + 63) / 64;
  // Layout: [ready bits | ~set bits | ~flags | ~leaving ranks | ~out-of-place bits].
  const size_t oop_offset = 2 * width + 1 + rank_words;
  std::vector<uint64_t> words(oop_offset + width, 0);
  std::vector<uint64_t> out_of_place(width, 0);
  std::vector<Request> uncached;
  for (auto& [name, entry] : pending_) {
    if (announced_.count(name)) continue;
    int32_t slot = entry.request.Cacheable() ? cache_.Find(name) : -1;
    if (slot >= 0 && cache_.Matches(slot, entry.request)) {
      SetBit(words, 0, slot);
      SetBit(words, width, slot);
      if (entry.request.out_of_place) SetBit(out_of_place, 0, slot);
    } else {
      uncached.push_back(entry.request);
      announced_[name] = true;
    }
  }
  // A rank inside join() is ready for every cached allreduce (it contributes the op's
  // identity), but not for other cached collectives: those stay partial, are evicted, and
  // reach the coordinator, which refuses them naming the joined ranks (coordinator.h).
  if (join_pending_)
    for (int32_t s = 0; s < slots; ++s)
      if (!cache_.Occupied(s) || Coordinator::RunsUnderJoin(cache_.Get(s).op_type))
        SetBit(words, 0, s);
  // Another set's cached collectives need nothing from this rank: ready here, set nowhere.
  bool set_work = false;
  if (membership_) {
    for (int32_t s = 0; s < slots; ++s)
      if (cache_.Occupied(s) && !Takes(cache_.Get(s))) SetBit(words, 0, s);
    for (const auto& [name, entry] : pending_) set_work = set_work || entry.request.process_set != 0;
  }
  uint64_t flags = 0;
  if (set_work) flags |= kSetWorkPending;
  if (!uncached.empty()) flags |= kHasUncached;
  if (shutdown_requested) flags |= kShutdown;
  if (coordinator_wants_broadcast_) flags |= kCoordinatorBroadcast;
  for (size_t i = width; i < 2 * width; ++i) words[i] = ~words[i];
  words[2 * width] = ~flags;
  // Which ranks ask to shut down, OR-ed like the flags, so the others can name them.
  std::vector<uint64_t> leaving(rank_words, 0);
  if (shutdown_requested) leaving[control_->rank() / 64] |= uint64_t{1} << (control_->rank() % 64);
  for (size_t i = 0; i < rank_words; ++i) words[2 * width + 1 + i] = ~leaving[i];
  for (size_t i = 0; i < width; ++i) words[oop_offset + i] = ~out_of_place[i];

  // Step 3: one allreduce.
  KERASHVD_RETURN_IF_ERROR(control_->AllreduceBitwiseAnd(words.data(), static_cast<int>(words.size())));
  std::vector<uint64_t> ready(words.begin(), words.begin() + width);
  std::vector<uint64_t> any(width);
  for (size_t i = 0; i < width; ++i) {
    any[i] = ~words[width + i];
    out_of_place[i] = ~words[oop_offset + i];  // now: set on any rank
  }
  flags = ~words[2 * width];
  const auto now = Clock::now();
  if (flags & kShutdown) {
    out->shutdown = true;
    for (int r = 0; r < world; ++r)
      if ((~words[2 * width + 1 + r / 64] >> (r % 64)) & 1) out->shutdown_ranks.push_back(r);
    return Status::Ok();
  }
  if (coordinator_) coordinator_->ObserveCachedBits(ready, any, now);

  // Step 4: full negotiation when asked for.
  ResponseList list;
  if (flags & (kHasUncached | kCoordinatorBroadcast)) {
    std::vector<std::string> gathered;
    KERASHVD_RETURN_IF_ERROR(control_->GatherToRoot(SerializeRequests(uncached), &gathered));
    std::string bytes;
    if (coordinator_) {
      for (const std::string& from_rank : gathered) {
        std::vector<Request> requests;
        KERASHVD_RETURN_IF_ERROR(ParseRequests(from_rank, &requests));
        for (const Request& r : requests) coordinator_->Ingest(r, now);
      }
      bytes = SerializeResponses(coordinator_->Decide(now));
    }
    KERASHVD_RETURN_IF_ERROR(control_->BroadcastFromRoot(&bytes));
    KERASHVD_RETURN_IF_ERROR(ParseResponses(bytes, &list));
  }
  if (coordinator_) coordinator_wants_broadcast_ = coordinator_->CheckStalls(now, world_ranks_[0]);
  if (!list.fatal_error.empty()) {
    out->fatal_error = list.fatal_error;
    return Status::Ok();
  }

  // Step 5: the work list, identical on every rank.
  std::vector<Response> work = std::move(list.responses);
  for (int32_t s = 0; s < slots; ++s) {
    bool set_everywhere = (ready[s / 64] >> (s % 64)) & 1;
    bool set_somewhere = (any[s / 64] >> (s % 64)) & 1;
    if (!set_everywhere || !set_somewhere) continue;
    Response r;
    r.request = cache_.Get(s);
    r.request.out_of_place = (out_of_place[s / 64] >> (s % 64)) & 1;
    r.any_joined = false;
    work.push_back(std::move(r));
  }
  for (int32_t s : list.evict_slots) cache_.Evict(s);
  for (const Response& r : work)
    if (r.kind == Response::Kind::kExecute && r.cache_slot >= 0) cache_.Insert(r.cache_slot, r.request);

  for (Response& r : work) {
    if (r.kind != Response::Kind::kJoinDone && !Takes(r.request)) continue;  // another set's
    WorkItem item;
    const std::string& name = r.request.name;
    if (r.kind == Response::Kind::kJoinDone) {
      join_pending_ = false;
      auto it = pending_.find(r.request.name);
      // The join entry's name is chosen by the caller; find it by type.
      for (it = pending_.begin(); it != pending_.end(); ++it)
        if (it->second.request.op_type == OpType::kJoin) break;
      if (it != pending_.end()) {
        item.entry = std::move(it->second);
        announced_.erase(it->first);
        pending_.erase(it);
      }
    } else {
      auto it = pending_.find(name);
      if (it != pending_.end()) {
        item.entry = std::move(it->second);
        pending_.erase(it);
        announced_.erase(name);
      }
    }
    item.response = std::move(r);
    item.ready = Clock::now();
    out->work.push_back(std::move(item));
  }
  bool any_bit = false;
  for (uint64_t w : any) any_bit = any_bit || w != 0;
  out->quiet = out->work.empty() && pending_.empty() && !any_bit &&
               !(flags & (kHasUncached | kCoordinatorBroadcast));
  out->set_work_pending = (flags & kSetWorkPending) != 0;
  return Status::Ok();
}

std::vector<TensorEntry> Controller::TakePending() {
  std::vector<TensorEntry> out;
  for (auto& [name, entry] : pending_) out.push_back(std::move(entry));
  pending_.clear();
  announced_.clear();
  return out;
}

}  // namespace kerashvd
