// TensorEntry: one submitted collective on this rank, with its buffers and completion callback.
// It never leaves the process; only its Request crosses to other ranks.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "message.h"
#include "status.h"

namespace kerashvd {

// What a finished collective hands back besides its outputs.
struct CollectiveResult {
  int32_t last_joined_rank = -1;           // join
  std::vector<int64_t> received_splits;    // alltoall: rows received from each rank
};

struct TensorEntry {
  Request request;
  // The process set whose members run this collective (0: all ranks). It picks the engine's
  // lane, and ranks in `request` (root_rank) count within the set.
  int process_set = 0;
  // One input per tensor in request.shapes: host memory when request.device is -1, else
  // memory on that GPU.
  std::vector<const void*> inputs;
  // Optional: blocks until the inputs are complete (a GPU framework's kernel returns before
  // the stream that produces them has run). Called on the background thread just before the
  // collective reads them; an error fails this entry (the collective still runs).
  std::function<Status()> wait_inputs;
  // One output per tensor. When the caller knows the output shape it allocates the output
  // up front and puts it here; a null output is allocated through `allocate` when the engine
  // knows its shape (allgather, alltoall).
  std::vector<void*> outputs;
  std::function<Status(size_t index, const Shape& shape, void** data)> allocate;
  // Alltoall: rows of the input to send to each rank, in rank order.
  std::vector<int64_t> splits;
  // Called exactly once, on the background thread, when the collective finished or failed.
  std::function<void(const Status&, const CollectiveResult&)> done;
  // Set by the engine: when the entry was submitted (for the timeline).
  std::chrono::steady_clock::time_point submitted;
};

}  // namespace kerashvd
