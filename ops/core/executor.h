// Executor: runs one planned group of a cycle's work on a backend and completes its entries.
//
// A carried allreduce (carry.h) arrives already reduced: the executor only writes its result
// out, postscaled, and completes it.
//
// Fused allreduce, step by step: copy every input into the fusion buffer in its wire type
// (WireType in types.h; applying prescale, and widening float16/bfloat16 to float32 for Min and
// Max), one in-place backend allreduce, copy every result out (applying postscale, and 1/size
// for Average). A single tensor that needs no widening skips the buffer and is reduced straight from its input into its output; so does a whole
// group whose backend reduces spans (the shared-memory pair), each tensor where it is.
// A rank that has joined owns no entry for some allreduce items: it contributes the identity
// of the reduction (zeros for Sum and Average, ones for Product, the lowest value for Max,
// the highest for Min: MemoryOps::FillIdentity), so every rank's result is that of the
// ranks that submitted, and its results go to scratch memory. (The coordinator refuses the
// other collectives while a rank has joined, so they always have every rank's entry.)
//
// The same executor serves host and GPU tensors: buffers, copies and scaling go through its
// MemoryOps, which for GPU memory enqueue on the communicator's stream; Run waits for them
// (MemoryOps::Finish) before it completes any entry, so outputs are final when `done` runs.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "controller.h"
#include "fusion.h"
#include "memory_ops.h"
#include "timeline.h"

namespace kerashvd {

class Executor {
 public:
  // `backend` and `memory` must work on the same memory and outlive the executor.
  // `timeline_prefix` starts the timeline row of each tensor (a process set's lane names its
  // set there, so that equal names in different sets get rows of their own).
  Executor(Backend* backend, MemoryOps* memory, Timeline* timeline, int rank, int size,
           std::string timeline_prefix = "")
      : backend_(backend), memory_(memory), timeline_(timeline), rank_(rank), size_(size),
        timeline_prefix_(std::move(timeline_prefix)) {}
  void Run(std::vector<WorkItem*>& group);
  // Completes every entry of `group` with `status` without communicating.
  static void Fail(std::vector<WorkItem*>& group, const Status& status);

 private:
  Status Allreduce(std::vector<WorkItem*>& group);
  // An allreduce already reduced (WorkItem::carried): its result, postscaled, to its output.
  Status FinishCarried(WorkItem& item);
  // A fused group on a backend that reduces spans (Backend::ReducesSpans).
  Status AllreduceSpans(std::vector<WorkItem*>& group, const ReduceOptions& options);
  Status Allgather(WorkItem& item);
  Status Broadcast(WorkItem& item);
  Status Alltoall(WorkItem& item, CollectiveResult* result);
  Status Reducescatter(WorkItem& item);
  // The output buffer of tensor i: preallocated, allocated now, or scratch on a joined rank.
  Status Output(WorkItem& item, size_t i, const Shape& shape, void** data);
  double PostscaleOf(const Request& r) const;
  // Records `phase` from `start` to now for every tensor of the group; returns now.
  Timeline::Clock::time_point Mark(const std::vector<WorkItem*>& group, const char* phase,
                                   Timeline::Clock::time_point start);

  Status Execute(std::vector<WorkItem*>& group, CollectiveResult* result);

  Backend* backend_;
  MemoryOps* memory_;
  Timeline* timeline_;
  int rank_;
  int size_;
  std::string timeline_prefix_;
};

}  // namespace kerashvd
