// Coordinator: rank 0's half of the negotiation (the protocol is described in controller.h).
//
// It keeps every request that went through full negotiation in a table until all ranks have
// submitted it (or joined), then checks that the ranks agree and issues one Response for it:
// execute (with a cache slot for its signature), an error that names the tensor, the field
// and each rank's value, or, when some rank sent it as a failed request, an error that names
// the tensor, that rank and its message. It also decides cache evictions, reports stalls, and
// completes join().
//
// Join: a rank inside join() counts as having submitted every collective. An allreduce then
// runs (the joined rank contributes the identity of the op, executor.h) and so does a barrier;
// a broadcast, allgather, alltoall or reducescatter becomes an error on every rank that
// submitted it, naming the ranks that have joined (RunsUnderJoin), since a joined rank has no
// data for it and any result would be silently wrong. Cached signatures are no way around
// this: a joined rank marks only the slots of allreduces as ready (controller.cc), so the
// others time out as partial, are evicted, and come here through full negotiation.
//
// Overlap reports (Request::in_flight, controller.h "Overlapping calls") are answered in the
// cycle they arrive, before anything else is decided: one kOverlap response per name, for the
// largest count reported, and whatever the table held of that name is dropped.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config.h"
#include "message.h"
#include "response_cache.h"

namespace kerashvd {

using Clock = std::chrono::steady_clock;

// Whether `rank` is a member of `process_set` (a Request::process_set other than 0). Only the
// world's lane negotiates such requests; ranks outside the set take no part in them.
using Membership = std::function<bool(int process_set, int rank)>;

class Coordinator {
 public:
  // `world_ranks[r]`: how rank r is named in messages (its world rank).
  Coordinator(int size, const Config& config, const ResponseCache* cache,
              std::vector<int> world_ranks, Membership membership = nullptr);

  // Each cycle, before the responses are decided: which cached slots were set by every rank
  // (ready) and by at least one rank (any). Slots set by some ranks only for too long are
  // evicted, so their tensors come through full negotiation, where missing ranks are named.
  void ObserveCachedBits(const std::vector<uint64_t>& ready, const std::vector<uint64_t>& any,
                         Clock::time_point now);
  // A request that rank `request.rank` sent through full negotiation.
  void Ingest(const Request& request, Clock::time_point now);
  // Responses for everything now submitted by all ranks, plus cache evictions and errors.
  ResponseList Decide(Clock::time_point now);
  // Whether a collective of type `op` can run while some of its ranks are inside join().
  static bool RunsUnderJoin(OpType op);
  // Reports stalled tensors; returns true when rank 0 needs a full negotiation next cycle to
  // broadcast evictions or a stall error even though no rank sent a new request.
  bool CheckStalls(Clock::time_point now, int rank);

 private:
  struct Pending {
    std::vector<Request> by_rank;     // valid where submitted[r]
    std::vector<bool> submitted;
    Clock::time_point first_seen;
    bool warned = false;
  };
  Response DecideOne(const std::string& name, const Pending& pending);
  // The error of a collective that cannot run under join (RunsUnderJoin) and found a rank
  // inside join(): the collective, the tensor, who submitted it, who joined, and the fix.
  std::string JoinedError(const std::string& name, const Pending& pending,
                          const Request& request) const;
  // Turns `response` into the error of a name that some rank sent as a failed request (its
  // own arguments were wrong); returns false when no rank did.
  bool FailedRequests(const std::string& name, const Pending& pending, Response* response) const;
  int32_t AllocateSlot(ResponseList* list);
  std::string StallReport(const std::string& name, const Pending& pending, double seconds) const;
  // The kOverlap response of a name reported by some ranks (rank -> calls in flight there).
  Response OverlapResponse(const Request& request, const std::map<int, int32_t>& counts) const;
  // Whether rank r takes part in `request` (always, except for another set's requests).
  bool Takes(const Request& request, int r) const {
    return request.process_set == 0 || !membership_ || membership_(request.process_set, r);
  }

  int size_;
  Config config_;
  std::vector<int> world_ranks_;
  Membership membership_;
  const ResponseCache* cache_;
  std::map<std::string, Pending> table_;
  // Overlap reports of this cycle: name -> (a report's request, rank -> calls in flight).
  std::map<std::string, std::pair<Request, std::map<int, int32_t>>> overlaps_;
  std::vector<std::string> arrival_order_;  // deterministic response order
  std::vector<bool> joined_;
  int32_t last_joined_ = -1;
  std::vector<int32_t> evictions_;           // decided, not yet broadcast
  std::vector<int32_t> assigned_this_list_;  // slots handed out in the list being built
  std::map<int32_t, Clock::time_point> partial_since_;
  std::map<int32_t, uint64_t> last_used_;    // slot -> cycle, for least-recently-used eviction
  uint64_t cycle_ = 0;
  std::string fatal_error_;
};

}  // namespace kerashvd
