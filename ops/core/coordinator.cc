#include "coordinator.h"

#include <algorithm>
#include <sstream>

#include "logging.h"

namespace kerashvd {
namespace {

bool TestBit(const std::vector<uint64_t>& bits, int32_t slot) {
  return (bits[slot / 64] >> (slot % 64)) & 1;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Whether some ranks submitted an allgather and others an allreduce under one name.
template <typename Pending>
bool GathersAgainstReduces(const Pending& pending) {
  bool gather = false, reduce = false;
  for (size_t r = 0; r < pending.by_rank.size(); ++r) {
    if (!pending.submitted[r]) continue;
    gather = gather || pending.by_rank[r].op_type == OpType::kAllgather;
    reduce = reduce || pending.by_rank[r].op_type == OpType::kAllreduce;
  }
  return gather && reduce;
}

// A cached slot set by some ranks but not all for this long is sent back to full negotiation.
constexpr double kPartialEvictSeconds = 1.0;

}  // namespace

Coordinator::Coordinator(int size, const Config& config, const ResponseCache* cache,
                         std::vector<int> world_ranks, Membership membership)
    : size_(size), config_(config), world_ranks_(std::move(world_ranks)),
      membership_(std::move(membership)), cache_(cache), joined_(size, false) {}

void Coordinator::ObserveCachedBits(const std::vector<uint64_t>& ready,
                                    const std::vector<uint64_t>& any, Clock::time_point now) {
  ++cycle_;
  for (int32_t slot = 0; slot < cache_->num_slots(); ++slot) {
    bool is_ready = TestBit(ready, slot) && TestBit(any, slot);
    bool is_partial = TestBit(any, slot) && !is_ready;
    if (is_ready) last_used_[slot] = cycle_;
    if (!is_partial) {
      partial_since_.erase(slot);
      continue;
    }
    auto it = partial_since_.emplace(slot, now).first;
    if (Seconds(now - it->second) > std::min(kPartialEvictSeconds, config_.stall_check_seconds) &&
        std::find(evictions_.begin(), evictions_.end(), slot) == evictions_.end()) {
      evictions_.push_back(slot);
      partial_since_.erase(it);
    }
  }
}

void Coordinator::Ingest(const Request& request, Clock::time_point now) {
  if (request.op_type == OpType::kJoin) {
    joined_[request.rank] = true;
    last_joined_ = request.rank;  // ranks arrive in rank order within a cycle
    return;
  }
  if (request.in_flight > 0) {
    auto& report = overlaps_[request.name];
    if (report.second.empty()) report.first = request;
    report.second[request.rank] = request.in_flight;
    return;
  }
  // A rank sending a cached name in full means its signature changed or its slot is stale:
  // evict it so every rank sends that name in full and the ranks can be compared.
  int32_t slot = cache_->Find(request.name);
  if (slot >= 0 && std::find(evictions_.begin(), evictions_.end(), slot) == evictions_.end())
    evictions_.push_back(slot);
  auto inserted = table_.emplace(request.name, Pending());
  Pending& pending = inserted.first->second;
  if (inserted.second) {
    pending.by_rank.resize(size_);
    pending.submitted.assign(size_, false);
    pending.first_seen = now;
    arrival_order_.push_back(request.name);
  }
  pending.by_rank[request.rank] = request;
  pending.submitted[request.rank] = true;
}

bool Coordinator::FailedRequests(const std::string& name, const Pending& pending,
                                 Response* response) const {
  std::vector<int> failed;
  for (int r = 0; r < size_; ++r)
    if (pending.submitted[r] && !pending.by_rank[r].error.empty()) failed.push_back(r);
  if (failed.empty()) return false;
  std::string ranks;  // "1" or "0, 2"
  for (size_t i = 0; i < failed.size(); ++i)
    ranks += (i ? ", " : "") + std::to_string(world_ranks_[failed[i]]);
  const char* plural = failed.size() == 1 ? "" : "s";
  std::ostringstream msg;
  msg << OpTypeName(response->request.op_type) << " '" << name << "' failed on rank" << plural
      << " " << ranks << ":";
  // Each message as a sentence, so the next one reads apart from it.
  auto sentence = [](const std::string& text) {
    return !text.empty() && text.back() == '.' ? text : text + ".";
  };
  if (failed.size() == 1) {
    msg << " " << sentence(pending.by_rank[failed[0]].error);
  } else {
    for (int r : failed)
      msg << " rank " << world_ranks_[r] << ": " << sentence(pending.by_rank[r].error);
  }
  msg << " Every rank of the collective raises this error; fix the arguments on rank" << plural
      << " " << ranks << ".";
  response->kind = Response::Kind::kArgumentError;
  response->error = msg.str();
  return true;
}

Response Coordinator::DecideOne(const std::string& name, const Pending& pending) {
  Response response;
  int first = -1;
  for (int r = 0; r < size_; ++r)
    if (pending.submitted[r]) {
      first = r;
      break;
    }
  response.request = pending.by_rank[first];
  for (int r = 0; r < size_; ++r) {
    if (joined_[r] && !pending.submitted[r] && Takes(response.request, r)) response.any_joined = true;
    if (pending.submitted[r] && pending.by_rank[r].out_of_place) response.request.out_of_place = true;
  }

  if (FailedRequests(name, pending, &response)) return response;
  for (int r = first + 1; r < size_; ++r) {
    if (!pending.submitted[r]) continue;
    std::string field = SignatureDifference(pending.by_rank[first], pending.by_rank[r]);
    if (field.empty()) continue;
    std::ostringstream msg;
    msg << "Mismatched " << OpTypeName(response.request.op_type) << " for tensor '" << name
        << "': ranks disagree on " << field << ":";
    for (int q = 0; q < size_; ++q)
      if (pending.submitted[q])
        msg << " rank " << world_ranks_[q] << " " << DescribeField(pending.by_rank[q], field, world_ranks_)
            << ";";
    msg << " Every rank must submit the same " << field
        << " for a tensor name. Check that each rank builds the same model and calls the same "
           "collectives in the same order with matching arguments.";
    if (field == "collective" && GathersAgainstReduces(pending))
      msg << " (An allreduce of sparse values, tf.IndexedSlices, runs as an allgather: pass "
             "the same kind of tensor on every rank, or densify it, e.g. sparse_as_dense=True.)";
    response.kind = Response::Kind::kError;
    response.error = msg.str();
    return response;
  }
  if (response.any_joined && !RunsUnderJoin(response.request.op_type)) {
    response.kind = Response::Kind::kError;
    response.error = JoinedError(name, pending, response.request);
    return response;
  }
  response.kind = Response::Kind::kExecute;
  return response;
}

bool Coordinator::RunsUnderJoin(OpType op) {
  // An allreduce has a neutral contribution (the identity of its op) and a barrier needs no
  // data; every other collective would deliver rows or values a joined rank does not have.
  return op == OpType::kAllreduce || op == OpType::kBarrier;
}

std::string Coordinator::JoinedError(const std::string& name, const Pending& pending,
                                     const Request& request) const {
  std::vector<int> joined, submitted;
  for (int r = 0; r < size_; ++r) {
    if (pending.submitted[r]) submitted.push_back(world_ranks_[r]);
    else if (joined_[r] && Takes(request, r)) joined.push_back(world_ranks_[r]);
  }
  const char* op = OpTypeName(request.op_type);
  std::ostringstream msg;
  auto ranks = [](const std::vector<int>& list) {
    return list.size() == 1 ? "rank " + std::to_string(list[0]) : "ranks " + RankList(list);
  };
  msg << "Cannot run " << op << " '" << name << "' (submitted by " << ranks(submitted)
      << ") while " << ranks(joined) << (joined.size() == 1 ? " has" : " have")
      << " joined: a rank inside join() takes part only in allreduce (contributing the "
         "identity of its op) and barrier; broadcast, allgather, alltoall and reducescatter "
         "need data from every rank, so the "
      << op
      << " fails on every rank that submitted it. Run it on every rank before any rank calls "
         "join(), or after join() has returned on every rank.";
  return msg.str();
}

int32_t Coordinator::AllocateSlot(ResponseList* list) {
  if (cache_->capacity() <= 0) return -1;
  auto taken = [&](int32_t s) {
    bool evicted = std::find(list->evict_slots.begin(), list->evict_slots.end(), s) !=
                   list->evict_slots.end();
    bool assigned = std::find(assigned_this_list_.begin(), assigned_this_list_.end(), s) !=
                    assigned_this_list_.end();
    return assigned || (cache_->Occupied(s) && !evicted);
  };
  for (int32_t s = 0; s < cache_->capacity(); ++s) {
    if (!taken(s)) {
      assigned_this_list_.push_back(s);
      return s;
    }
  }
  // Full: reuse the least recently used slot not handed out in this list.
  int32_t victim = -1;
  uint64_t oldest = UINT64_MAX;
  for (int32_t s = 0; s < cache_->num_slots(); ++s) {
    if (std::find(assigned_this_list_.begin(), assigned_this_list_.end(), s) !=
        assigned_this_list_.end())
      continue;
    uint64_t used = last_used_.count(s) ? last_used_[s] : 0;
    if (used < oldest) {
      oldest = used;
      victim = s;
    }
  }
  if (victim < 0) return -1;
  list->evict_slots.push_back(victim);
  assigned_this_list_.push_back(victim);
  return victim;
}

ResponseList Coordinator::Decide(Clock::time_point now) {
  ResponseList list;
  list.evict_slots.swap(evictions_);
  assigned_this_list_.clear();
  for (int32_t s : list.evict_slots) {
    partial_since_.erase(s);
    last_used_.erase(s);
  }

  for (const auto& [name, report] : overlaps_) {
    list.responses.push_back(OverlapResponse(report.first, report.second));
    if (table_.erase(name))
      arrival_order_.erase(std::find(arrival_order_.begin(), arrival_order_.end(), name));
  }
  overlaps_.clear();

  std::vector<std::string> still_waiting;
  for (const std::string& name : arrival_order_) {
    const Pending& pending = table_.at(name);
    const Request& any = *std::find_if(pending.by_rank.begin(), pending.by_rank.end(),
                                       [&](const Request& q) { return q.name == name; });
    bool ready = true;
    for (int r = 0; r < size_; ++r)
      ready = ready && (pending.submitted[r] || joined_[r] || !Takes(any, r));
    if (!ready) {
      still_waiting.push_back(name);
      continue;
    }
    Response response = DecideOne(name, pending);
    if (response.kind == Response::Kind::kExecute && response.request.Cacheable()) {
      response.cache_slot = AllocateSlot(&list);
      if (response.cache_slot >= 0) last_used_[response.cache_slot] = cycle_;
    }
    list.responses.push_back(std::move(response));
    table_.erase(name);
  }
  arrival_order_.swap(still_waiting);

  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    Response done;
    done.kind = Response::Kind::kJoinDone;
    done.request.name = "join";
    done.request.op_type = OpType::kJoin;
    done.last_joined_rank = last_joined_;
    list.responses.push_back(done);
    joined_.assign(size_, false);
  }
  list.fatal_error = fatal_error_;
  (void)now;
  return list;
}

Response Coordinator::OverlapResponse(const Request& request,
                                      const std::map<int, int32_t>& counts) const {
  int32_t calls = 0;
  std::ostringstream where;
  for (const auto& [rank, count] : counts) {
    calls = std::max(calls, count);
    where << (where.tellp() > 0 ? ", " : "") << "rank " << world_ranks_[rank] << " (" << count
          << ")";
  }
  Response response;
  response.kind = Response::Kind::kOverlap;
  response.request = request;
  response.request.in_flight = calls;
  response.overlap_calls = calls;
  std::ostringstream msg;
  msg << OpTypeName(request.op_type) << " '" << request.name
      << "' was called again while an earlier call of it was still in flight, on " << where.str()
      << ". Ranks pair collectives by name, so overlapping calls of one name cannot be told "
         "apart and could be paired with different calls on other ranks. Every rank fails "
      << calls << " calls of '" << request.name
      << "' (those in flight, then its next ones up to that number). Give each thread its own "
         "names (name=), use one tf.function per thread (traced in that thread), or hold a "
         "lock around the call.";
  response.error = msg.str();
  return response;
}

std::string Coordinator::StallReport(const std::string& name, const Pending& pending,
                                     double seconds) const {
  std::vector<int> have, missing;
  int first = -1;
  for (int r = 0; r < size_; ++r) {
    if (pending.submitted[r]) {
      have.push_back(world_ranks_[r]);
      if (first < 0) first = r;
    }
  }
  for (int r = 0; r < size_; ++r)
    if (!pending.submitted[r] && !joined_[r] && Takes(pending.by_rank[first], r))
      missing.push_back(world_ranks_[r]);
  std::ostringstream msg;
  msg << "Stalled " << OpTypeName(pending.by_rank[first].op_type) << " '" << name << "' for "
      << static_cast<int>(seconds) << " s: submitted by ranks " << RankList(have)
      << ", still missing on ranks " << RankList(missing)
      << ". The missing ranks have not reached this collective: they may have skipped a step, "
         "taken a different branch, or named the tensor differently.";
  return msg.str();
}

bool Coordinator::CheckStalls(Clock::time_point now, int rank) {
  for (const std::string& name : arrival_order_) {
    Pending& pending = table_.at(name);
    double age = Seconds(now - pending.first_seen);
    if (config_.stall_shutdown_seconds > 0 && age > config_.stall_shutdown_seconds &&
        fatal_error_.empty()) {
      std::ostringstream limit;
      limit << config_.stall_shutdown_seconds;
      fatal_error_ = StallReport(name, pending, age) +
                     " kerashvd stopped because KERASHVD_STALL_SHUTDOWN_TIME was exceeded (" +
                     limit.str() +
                     " s; if a rank legitimately works alone for longer, raise it, or set 0 to "
                     "wait for ever).";
    }
    if (config_.stall_check_seconds > 0 && age > config_.stall_check_seconds && !pending.warned) {
      pending.warned = true;
      LogWarning(rank, StallReport(name, pending, age));
    }
  }
  return !evictions_.empty() || !fatal_error_.empty();
}

}  // namespace kerashvd
