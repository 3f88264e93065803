#include "controller.h"

#include <cstring>

#include "buffer_ops.h"

namespace kerashvd {
namespace {

enum Flag : uint64_t {
  kHasUncached = 1, kShutdown = 2, kCoordinatorBroadcast = 4, kSetWorkPending = 8
};

void SetBit(std::vector<uint64_t>& words, size_t offset, int32_t slot) {
  words[offset + slot / 64] |= uint64_t{1} << (slot % 64);
}

// The carried payload of `entry` (prescaled as the executor prescales), or of a rank without
// it (joined), the identity of the op.
void FillPayload(const TensorEntry* entry, const Request& sig, uint64_t* payload) {
  const int64_t count = NumElements(sig.shapes[0]);
  const ReduceOp op = sig.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : sig.reduce_op;
  if (!entry) FillIdentity(payload, count, sig.dtype, op);
  else if (sig.prescale != 1.0) ScaleCopy(entry->inputs[0], payload, count, sig.dtype, sig.prescale);
  else std::memcpy(payload, entry->inputs[0], count * DataTypeSize(sig.dtype));
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
    if (entry.request.op_type == OpType::kJoin) {
      if (join_entry_) {
        entry.done(Status::InvalidArgument(
                       "join() is already running on rank " +
                           std::to_string(world_ranks_[control_->rank()]) +
                           ": call it from one thread at a time."),
                   CollectiveResult());
      } else {
        join_entry_ = std::move(entry);
        join_announced_ = false;
      }
      continue;
    }
    auto deficit = deficits_.find(name);
    if (deficit != deficits_.end()) {  // a call the other ranks already failed (FailOverlap)
      entry.done(Status::InvalidArgument(deficit->second.error), CollectiveResult());
      if (--deficit->second.calls <= 0) deficits_.erase(deficit);
      continue;
    }
    pending_[name].push_back(std::move(entry));
  }
}

void Controller::FailOverlap(const Response& response) {
  const std::string& name = response.request.name;
  const Status error = Status::InvalidArgument(response.error);
  int32_t failed = 0;
  auto it = pending_.find(name);
  if (it != pending_.end()) {
    for (TensorEntry& entry : it->second) {
      entry.done(error, CollectiveResult());
      ++failed;
    }
    pending_.erase(it);
  }
  announced_.erase(name);
  if (failed < response.overlap_calls && !join_entry_)
    deficits_[name] = Deficit{response.overlap_calls - failed, response.error};
}

Status Controller::RunCycle(std::deque<TensorEntry> incoming, bool shutdown_requested,
                            CycleResult* out) {
  Intake(incoming);
  const int32_t slots = cache_.num_slots();
  const size_t width = (slots + 63) / 64;

  // The collective every rank predicts for this cycle, if it may be carried (carry.h).
  const int world = control_->size();
  int32_t carry_slot = world > 1 && carry_bytes_ > 0 ? predictor_.Predict() : -1;
  if (carry_slot >= 0 && !(cache_.Occupied(carry_slot) &&
                           Carriable(cache_.Get(carry_slot), carry_bytes_)))
    carry_slot = -1;
  const TensorEntry* carry_entry = nullptr;  // this rank's entry of it, when pending here

  // Step 2: bits for cached entries, full requests for the rest.
  const size_t rank_words = (world + 63) / 64;
  // Layout: [ready bits | ~set bits | ~flags | ~leaving ranks | ~out-of-place bits].
  const size_t oop_offset = 2 * width + 1 + rank_words;
  std::vector<uint64_t> words(oop_offset + width, 0);
  std::vector<uint64_t> out_of_place(width, 0);
  std::vector<Request> uncached;
  for (auto& [name, queue] : pending_) {
    if (queue.size() > 1) {  // an overlap: no rank may pair these (see "Overlapping calls")
      Request report = queue.front().request;
      report.in_flight = static_cast<int32_t>(queue.size());
      uncached.push_back(std::move(report));
      continue;
    }
    if (announced_.count(name)) continue;
    const TensorEntry& entry = queue.front();
    int32_t slot = entry.request.Cacheable() ? cache_.Find(name) : -1;
    if (slot >= 0 && cache_.Matches(slot, entry.request)) {
      SetBit(words, 0, slot);
      SetBit(words, width, slot);
      if (entry.request.out_of_place) SetBit(out_of_place, 0, slot);
      if (slot == carry_slot && !entry.wait_inputs) carry_entry = &entry;
    } else {
      uncached.push_back(entry.request);
      announced_[name] = true;
    }
  }
  if (join_entry_ && !join_announced_) {
    uncached.push_back(join_entry_->request);
    join_announced_ = true;
  }
  // A rank inside join() is ready for every cached allreduce (it contributes the op's
  // identity), but not for other cached collectives: those stay partial, are evicted, and
  // reach the coordinator, which refuses them naming the joined ranks (coordinator.h).
  if (join_entry_)
    for (int32_t s = 0; s < slots; ++s)
      if (!cache_.Occupied(s) || Coordinator::RunsUnderJoin(cache_.Get(s).op_type))
        SetBit(words, 0, s);
  // Another set's cached collectives need nothing from this rank: ready here, set nowhere.
  bool set_work = false;
  if (membership_) {
    for (int32_t s = 0; s < slots; ++s)
      if (cache_.Occupied(s) && !Takes(cache_.Get(s))) SetBit(words, 0, s);
    for (const auto& [name, queue] : pending_)
      set_work = set_work || queue.front().request.process_set != 0;
  }
  uint64_t flags = 0;
  if (set_work) flags |= kSetWorkPending;
  if (!uncached.empty()) flags |= kHasUncached;
  if (shutdown_requested) flags |= kShutdown;
  if (coordinator_wants_broadcast_ || proposal_) flags |= kCoordinatorBroadcast;
  for (size_t i = width; i < 2 * width; ++i) words[i] = ~words[i];
  words[2 * width] = ~flags;
  // Which ranks ask to shut down, OR-ed like the flags, so the others can name them.
  std::vector<uint64_t> leaving(rank_words, 0);
  if (shutdown_requested) leaving[control_->rank() / 64] |= uint64_t{1} << (control_->rank() % 64);
  for (size_t i = 0; i < rank_words; ++i) words[2 * width + 1 + i] = ~leaving[i];
  for (size_t i = 0; i < width; ++i) words[oop_offset + i] = ~out_of_place[i];

  // Step 3: one allreduce, carrying the predicted collective's data when there is one.
  std::vector<uint64_t> carried;  // its result, when every rank had it pending
  if (carry_slot >= 0) {
    const Request& sig = cache_.Get(carry_slot);
    const CarryLayout layout = CarryLayout::Of(sig, static_cast<int>(words.size()) + 1);
    std::vector<uint64_t> message = layout.NewMessage();
    std::copy(words.begin(), words.end(), message.begin() + layout.words_offset());
    const size_t valid = layout.words_offset() + words.size();
    if (carry_entry) {
      message[valid] = ~uint64_t{0};
      FillPayload(carry_entry, sig, message.data() + layout.payload_offset());
    }
    KERASHVD_RETURN_IF_ERROR(
        control_->AllreduceCarry(message.data(), static_cast<int>(message.size())));
    if (!layout.HeaderIntact(message.data()))
      return Status::Internal("the ranks predicted different collectives to carry in one "
                              "negotiation (carry.h): a kerashvd bug; set KERASHVD_CARRY_BYTES=0 "
                              "to run without carried allreduces");
    std::copy(message.begin() + layout.words_offset(), message.begin() + valid, words.begin());
    if (message[valid] == ~uint64_t{0})
      carried.assign(message.begin() + layout.payload_offset(), message.end());
  } else {
    KERASHVD_RETURN_IF_ERROR(
        control_->AllreduceBitwiseAnd(words.data(), static_cast<int>(words.size())));
  }
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
      ResponseList decided = coordinator_->Decide(now);
      decided.tune = proposal_;
      proposal_.reset();
      bytes = SerializeResponses(decided);
    }
    KERASHVD_RETURN_IF_ERROR(control_->BroadcastFromRoot(&bytes));
    KERASHVD_RETURN_IF_ERROR(ParseResponses(bytes, &list));
  }
  if (coordinator_) coordinator_wants_broadcast_ = coordinator_->CheckStalls(now, world_ranks_[0]);
  if (!list.fatal_error.empty()) {
    out->fatal_error = list.fatal_error;
    return Status::Ok();
  }
  out->tune = list.tune;

  // Step 5: the work list, identical on every rank.
  std::vector<Response> work = std::move(list.responses);
  std::vector<int32_t> work_slots;  // the cache slot of each, or -1
  for (const Response& r : work) work_slots.push_back(r.cache_slot);
  size_t carried_index = work.size() + slots;  // none
  for (int32_t s = 0; s < slots; ++s) {
    bool set_everywhere = (ready[s / 64] >> (s % 64)) & 1;
    bool set_somewhere = (any[s / 64] >> (s % 64)) & 1;
    if (!set_everywhere || !set_somewhere) continue;
    Response r;
    r.request = cache_.Get(s);
    r.request.out_of_place = (out_of_place[s / 64] >> (s % 64)) & 1;
    r.any_joined = false;
    if (s == carry_slot && !carried.empty()) carried_index = work.size();
    work.push_back(std::move(r));
    work_slots.push_back(s);
  }
  for (int32_t s : list.evict_slots) cache_.Evict(s);
  for (const Response& r : work)
    if (r.kind == Response::Kind::kExecute && r.cache_slot >= 0) cache_.Insert(r.cache_slot, r.request);
  // What the next cycle predicts, learnt from this one's work list (the same everywhere).
  if (!list.evict_slots.empty()) predictor_.Reset();
  if (!work.empty())
    predictor_.Observe(work.size() == 1 && work[0].kind == Response::Kind::kExecute
                           ? work_slots[0] : -1);

  for (size_t w = 0; w < work.size(); ++w) {
    Response& r = work[w];
    if (r.kind != Response::Kind::kJoinDone && !Takes(r.request)) continue;  // another set's
    if (r.kind == Response::Kind::kOverlap) {
      FailOverlap(r);
      continue;
    }
    WorkItem item;
    if (r.kind == Response::Kind::kJoinDone) {
      item.entry = std::move(join_entry_);
      join_entry_.reset();
    } else {
      auto it = pending_.find(r.request.name);
      if (it != pending_.end()) {
        item.entry = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) pending_.erase(it);
        announced_.erase(r.request.name);
      }
    }
    item.response = std::move(r);
    item.ready = Clock::now();
    if (w == carried_index) item.carried = std::move(carried);
    out->work.push_back(std::move(item));
  }
  bool any_bit = false;
  for (uint64_t w : any) any_bit = any_bit || w != 0;
  out->quiet = out->work.empty() && !has_pending() && !any_bit &&
               !(flags & (kHasUncached | kCoordinatorBroadcast));
  out->set_work_pending = (flags & kSetWorkPending) != 0;
  return Status::Ok();
}

bool Controller::ReducesAlone(const WorkItem& item) const {
  const Response& r = item.response;
  return carry_bytes_ > 0 && item.carried.empty() && r.kind == Response::Kind::kExecute &&
         Carriable(r.request, carry_bytes_) && OrderMatters(r.request, control_->size());
}

Status Controller::ReduceAlone(WorkItem& item) {
  const Request& sig = item.response.request;
  const CarryLayout layout = CarryLayout::Of(sig, 0);
  std::vector<uint64_t> message = layout.NewMessage();
  FillPayload(item.entry ? &*item.entry : nullptr, sig, message.data() + layout.payload_offset());
  KERASHVD_RETURN_IF_ERROR(control_->AllreduceCarry(message.data(), static_cast<int>(message.size())));
  if (!layout.HeaderIntact(message.data()))
    return Status::Internal("the ranks disagree on the allreduce of '" + sig.name +
                            "' (carry.h): a kerashvd bug; set KERASHVD_CARRY_BYTES=0 to run "
                            "without carried allreduces");
  item.carried.assign(message.begin() + layout.payload_offset(), message.end());
  return Status::Ok();
}

std::vector<TensorEntry> Controller::TakePending() {
  std::vector<TensorEntry> out;
  for (auto& [name, queue] : pending_)
    for (TensorEntry& entry : queue) out.push_back(std::move(entry));
  if (join_entry_) out.push_back(std::move(*join_entry_));
  join_entry_.reset();
  pending_.clear();
  announced_.clear();
  return out;
}

}  // namespace kerashvd
