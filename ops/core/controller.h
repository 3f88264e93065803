// Controller: the negotiation protocol, run once per cycle by every rank's background thread.
//
// Goal: every rank ends the cycle with the same ordered list of collectives to run now, so
// that they enter the same backend calls in the same order, and ranks that disagree about a
// tensor get an error instead of a hang.
//
// One cycle, on every rank:
//   1. Take newly submitted entries into `pending_`, a queue per name (see "Overlapping calls").
//   2. For each name with one pending entry not yet announced: if the response cache holds its
//      name with the same signature, set its slot's bit; otherwise queue its Request for full
//      negotiation and mark it announced. A name with several pending entries sets no bit and
//      sends an overlap report instead. A rank inside join() sets the bit of every slot but
//      those of collectives that cannot run under join (Coordinator::RunsUnderJoin).
//   3. One bitwise-AND allreduce of [bits | ~bits | ~flags | ~leaving | ~out-of-place bits]:
//      yields, identically everywhere, the slots set on every rank (AND), the slots set on
//      any rank (OR, by De Morgan), the OR of the flags (someone has uncached requests / wants
//      shutdown / rank 0 has evictions or a stall error to broadcast), which ranks are leaving,
//      and the slots that some rank reduces out of place (Request::out_of_place; for full
//      negotiation the coordinator ORs the requests' flags instead).
//   4. Only if a flag asks for it: gather the queued Requests to rank 0, whose Coordinator
//      decides, and broadcast its ResponseList. In steady state (every name cached) step 3 is
//      the whole negotiation: one small allreduce per cycle.
//      Rank 0 also forces this step when autotune has a decision to send (ProposeTune): it
//      travels in the ResponseList, so every rank receives it in the same cycle.
//   5. The cycle's work is the broadcast responses in the coordinator's order, then every slot
//      that is ready (set on all ranks, and really submitted somewhere) in slot order. The
//      signatures of ready slots are read before the list's evictions and insertions are
//      applied, in that order, so every copy of the cache stays identical.
//
// Failed requests: a rank whose own arguments for a collective are wrong (alltoall splits, an
// unpicklable object, a root rank out of range: anything only that rank can see) cannot run
// it, while the other ranks already wait in it. Failing only locally would leave them waiting
// forever, so that rank still submits the collective under its name, with Request::error set
// to its message and no data. Such a request is never served by the cache (step 2 sends it in
// full), and once every rank has submitted the name (or joined), the coordinator answers it
// with a kArgumentError response instead of comparing signatures: the collective fails on
// every rank with Status::InvalidArgument naming the tensor, the failed rank(s) and their
// messages, and nothing is communicated for it. The ranks stay in step, so the job goes on.
//
// Overlapping calls: ranks pair collectives by name alone, so two calls of one name in flight
// at once on a rank (two threads using one name=, or one traced function holding a named
// collective; a function whose graph runs the same collective twice) cannot be told apart, and each rank could pair a
// different one of them with the other ranks' calls: wrong results without an error. So no
// rank pairs them. A rank whose queue for a name holds k >= 2 entries sets no cache bit for
// it and sends the coordinator an overlap report (Request::in_flight = k). In that same cycle
// the coordinator answers with a kOverlap response for the name, with c = the largest k
// reported (and drops whatever it held of the name), and every rank fails c calls of the
// name: those it has pending (never more than c, since a rank's queue only grows at step 1),
// and, when it had fewer, its next arrivals of the name up to c (Intake fails them at once,
// without negotiation), so that a late thread's call fails too instead of waiting for
// partners that already failed. Every rank thus consumes the same c calls, and the (c+1)-th
// call of the name pairs across ranks again. A rank inside join() records no deficit: it
// makes no calls of its own until the join ends. The error names the name, the ranks and
// their counts, and the fixes. Calls of one name that never overlap on any rank are paired
// in each rank's order, which is the program's order in one thread but not across threads:
// that case cannot be detected, and names shared between threads must be avoided
// (docs/collectives.md).
//
// Carried allreduce (carry.h): when every rank predicts the same small cached allreduce for
// this cycle, step 3's allreduce also carries its data; if every rank had it pending, step 5
// puts it in the work list already reduced, and no second collective runs for it.
//
// Invariants: every rank runs the same number of cycles (each has a collective), applies the
// same lists in the same order, and so holds the same cache and produces the same work list.
// A rank that has joined owns no entry for some allreduce work items and contributes the
// identity of their op; other collectives never run with a joined rank (coordinator.h).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "carry.h"
#include "config.h"
#include "control_plane.h"
#include "coordinator.h"
#include "response_cache.h"
#include "tensor_entry.h"

namespace kerashvd {

struct WorkItem {
  Response response;
  std::optional<TensorEntry> entry;  // empty when this rank has joined and owns no entry
  std::chrono::steady_clock::time_point ready;  // when negotiation found it ready everywhere
  std::chrono::steady_clock::time_point cycle_start;  // when that cycle began (set by the lane)
  // Non-empty: the allreduce's result (before postscale), reduced in the negotiation's own
  // message (carry.h) or by Controller::ReduceAlone; the executor only hands it over.
  std::vector<uint64_t> carried;
};

struct CycleResult {
  std::vector<WorkItem> work;
  bool shutdown = false;     // some rank asked to shut down
  std::vector<int> shutdown_ranks;  // ...these ones
  std::string fatal_error;   // the engine must stop on every rank with this message
  // Nothing happened anywhere as far as this rank can see: no work, nothing pending here, no
  // rank announced a tensor. The engine then lengthens its idle wait (see engine.h).
  bool quiet = false;
  // Some rank has a collective of a process set pending on this (the world's) lane: the ranks
  // outside the set must keep cycling briefly, since the set cannot finish without them.
  bool set_work_pending = false;
  // Autotune's decision, the same on every rank in the same cycle (autotune.h).
  std::optional<TuneDecision> tune;
};

class Controller {
 public:
  // `world_ranks[r]`: how rank r of this communicator is named in messages (its world rank).
  // `membership`: the world's lane only, which also negotiates GPU collectives of process
  // sets (Request::process_set); ranks outside such a set set its cache bits as if ready and
  // drop its responses.
  Controller(ControlPlane* control, const Config& config, std::vector<int> world_ranks,
             Membership membership = nullptr);
  Status RunCycle(std::deque<TensorEntry> incoming, bool shutdown_requested, CycleResult* out);
  // Entries still waiting on this rank, handed over so they can be failed at shutdown.
  std::vector<TensorEntry> TakePending();
  bool joined() const { return join_entry_.has_value(); }
  // Whether entries submitted on this rank still wait for other ranks.
  bool has_pending() const { return !pending_.empty() || join_entry_.has_value(); }
  const ResponseCache& cache() const { return cache_; }
  // Allreduces up to `bytes` that every rank predicts may ride in the negotiation (carry.h);
  // 0: none. The same on every rank (the lane agrees on it with rank 0 first).
  void set_carry_bytes(int64_t bytes) { carry_bytes_ = bytes; }
  // Whether `item` (alone in its fusion group, not carried) must be reduced by ReduceAlone, so
  // that its bits equal those it gets when carried (carry.h, "Bits").
  bool ReducesAlone(const WorkItem& item) const;
  // Reduces `item` through the control plane as a carried collective with no negotiation
  // words, and puts the result in item.carried. Collective: every rank calls it for the same
  // item in the same order.
  Status ReduceAlone(WorkItem& item);
  // Rank 0: sends `decision` to every rank with the next cycle's ResponseList, where
  // CycleResult::tune returns it on every rank.
  void ProposeTune(const TuneDecision& decision) { proposal_ = decision; }

 private:
  void Intake(std::deque<TensorEntry>& incoming);
  // Fails this rank's calls of the name of an overlap response (see "Overlapping calls").
  void FailOverlap(const Response& response);
  // Whether this rank takes part in `request` (always, except for another set's requests).
  bool Takes(const Request& request) const {
    return request.process_set == 0 || !membership_ ||
           membership_(request.process_set, control_->rank());
  }

  ControlPlane* control_;
  Config config_;
  std::vector<int> world_ranks_;
  Membership membership_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  // Pending entries by name, in submission order; more than one is an overlap.
  std::map<std::string, std::deque<TensorEntry>> pending_;
  std::map<std::string, bool> announced_;
  // Calls of a name still to fail on arrival after an overlap, and the error they get.
  struct Deficit {
    int32_t calls = 0;
    std::string error;
  };
  std::map<std::string, Deficit> deficits_;
  // This rank's join() (kept apart from pending_: a collective may be named like it).
  std::optional<TensorEntry> join_entry_;
  bool join_announced_ = false;
  bool coordinator_wants_broadcast_ = false;
  std::optional<TuneDecision> proposal_;  // rank 0: autotune's decision still to send
  int64_t carry_bytes_ = 0;
  CarryPredictor predictor_;
};

}  // namespace kerashvd
