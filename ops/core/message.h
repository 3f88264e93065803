// Messages of the negotiation protocol (see controller.h for the protocol itself).
//
// A Request is what one rank asks for: "run collective <name> with this signature", or, from a
// rank whose own arguments for <name> were wrong, "<name> failed here with this message" (a
// failed request, see controller.h). A Response is the coordinator's decision about one name,
// identical on every rank: execute it (and remember its signature in cache slot k), or fail it
// with a message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autotune.h"
#include "status.h"
#include "types.h"

namespace kerashvd {

struct Request {
  int32_t rank = 0;  // the submitting rank
  std::string name;  // the key every rank uses for this collective
  OpType op_type = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  int32_t root_rank = 0;  // broadcast only
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t device = -1;       // -1: host memory; otherwise a GPU ordinal
  // The process set whose members run it, for a GPU collective of a set other than the
  // global one, which the world's lane negotiates (see device_router.h); 0 otherwise.
  int32_t process_set = 0;
  std::vector<Shape> shapes; // one per tensor; grouped collectives carry several
  // Not part of the signature (ranks may differ): a single-tensor allreduce that reads its
  // input from a buffer other than its output. In a Response it is the OR over the ranks,
  // which lets the backend choose an algorithm suited to out-of-place calls (ReduceOptions).
  bool out_of_place = false;
  // Non-empty: this rank could not run the collective (its own arguments were wrong) and says
  // why; it submits no data, and the collective fails on every rank (controller.h).
  std::string error;
  // Non-zero: this rank has this many collectives of `name` in flight at once (two threads
  // sharing a name, or a traced function run twice at once), which no rank can pair safely;
  // the coordinator fails the name on every rank (controller.h, "Overlapping calls").
  int32_t in_flight = 0;

  // Allgather and alltoall let the first dimension differ between ranks and calls; it is then
  // not part of what the ranks must agree on.
  bool FirstDimVaries() const {
    return op_type == OpType::kAllgather || op_type == OpType::kAlltoall;
  }
  // Whether this request's signature may be remembered by the response cache.
  // A failed request always goes through full negotiation, where the coordinator sees it.
  bool Cacheable() const {
    return op_type != OpType::kBarrier && op_type != OpType::kJoin && error.empty() &&
           in_flight == 0;
  }
};

// Compares what ranks must agree on. Returns "" when a and b agree, otherwise the name of the
// first field that differs ("shape", "dtype", ...).
std::string SignatureDifference(const Request& a, const Request& b);
// The value of `field` (as named by SignatureDifference) in a readable form; ranks of the
// request's communicator are shown as `world_ranks[rank]`.
std::string DescribeField(const Request& r, const std::string& field,
                          const std::vector<int>& world_ranks);

struct Response {
  // kError: the ranks disagree (Status::Mismatch on every rank); kArgumentError: some rank sent
  // a failed request (Status::InvalidArgument on every rank); kOverlap: some rank had several
  // calls of the name in flight at once, and every rank fails `overlap_calls` of them
  // (Status::InvalidArgument; controller.h, "Overlapping calls").
  enum class Kind : uint8_t {
    kExecute = 0, kError = 1, kJoinDone = 2, kArgumentError = 3, kOverlap = 4
  };
  Kind kind = Kind::kExecute;
  Request request;            // the agreed signature (from the lowest submitting rank)
  std::string error;          // kError, kArgumentError: the message every rank raises
  int32_t cache_slot = -1;    // kExecute: remember the signature in this slot (-1: do not)
  int32_t last_joined_rank = -1;  // kJoinDone
  bool any_joined = false;    // kExecute: some rank has joined and contributes no data
  int32_t overlap_calls = 0;  // kOverlap: calls of the name each rank fails
};

struct ResponseList {
  std::vector<int32_t> evict_slots;  // applied before the responses' cache insertions
  std::vector<Response> responses;
  std::string fatal_error;           // non-empty: the engine stops on every rank with this
  // Autotune's next settings, applied by every rank after this cycle's negotiation (autotune.h).
  std::optional<TuneDecision> tune;
};

std::string SerializeRequests(const std::vector<Request>& requests);
Status ParseRequests(const std::string& bytes, std::vector<Request>* requests);
std::string SerializeResponses(const ResponseList& list);
Status ParseResponses(const std::string& bytes, ResponseList* list);

}  // namespace kerashvd
