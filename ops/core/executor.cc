#include "executor.h"


namespace kerashvd {
namespace {

Shape WithFirstDim(Shape shape, int64_t first) {
  if (shape.empty()) shape.push_back(first);
  else shape[0] = first;
  return shape;
}

// Rows of a reducescatter result on `rank`: the first rows % size ranks get one extra.
int64_t ScatterRows(int64_t rows, int rank, int size) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

}  // namespace

double Executor::PostscaleOf(const Request& r) const {
  return r.postscale * (r.reduce_op == ReduceOp::kAverage ? 1.0 / size_ : 1.0);
}

Status Executor::Output(WorkItem& item, size_t i, const Shape& shape, void** data) {
  int64_t bytes = NumElements(shape) * DataTypeSize(item.response.request.dtype);
  if (!item.entry) return memory_->Scratch(bytes, data);
  TensorEntry& e = *item.entry;
  if (i < e.outputs.size() && e.outputs[i] != nullptr) {
    *data = e.outputs[i];
    return Status::Ok();
  }
  if (!e.allocate) {
    // A preallocated output with no elements has no data pointer, and needs none.
    if (bytes == 0 && i < e.outputs.size()) {
      *data = nullptr;
      return Status::Ok();
    }
    return Status::Internal("no output buffer and no allocator");
  }
  return e.allocate(i, shape, data);
}

Timeline::Clock::time_point Executor::Mark(const std::vector<WorkItem*>& group, const char* phase,
                                           Timeline::Clock::time_point start) {
  auto now = Timeline::Clock::now();
  if (timeline_->active())
    for (WorkItem* item : group)
      timeline_->Phase(timeline_prefix_ + item->response.request.name, phase, start, now);
  return now;
}

namespace {

const char* CollectivePhase(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kAlltoall: return "ALLTOALL";
    case OpType::kReducescatter: return "REDUCESCATTER";
    case OpType::kBarrier: return "BARRIER";
    case OpType::kJoin: return "JOIN";
  }
  return "COLLECTIVE";
}

}  // namespace

void Executor::Fail(std::vector<WorkItem*>& group, const Status& status) {
  for (WorkItem* item : group)
    if (item->entry && item->entry->done) item->entry->done(status, CollectiveResult());
}

void Executor::Run(std::vector<WorkItem*>& group) {
  const auto start = Timeline::Clock::now();
  if (timeline_->active())
    for (WorkItem* item : group) {
      const std::string name = timeline_prefix_ + item->response.request.name;
      if (item->entry) timeline_->Phase(name, "NEGOTIATE", item->entry->submitted, item->ready);
      if (item->entry && item->cycle_start > item->entry->submitted)
        timeline_->Phase(name, "LAST_CYCLE", item->cycle_start, item->ready);
      timeline_->Phase(name, "QUEUE", item->ready, start);
    }
  // Inputs produced asynchronously (on a GPU stream) must be complete before they are read.
  // A rank whose inputs failed still takes part in the collective, so that the other ranks
  // are not left waiting, and reports the failure on its own entries.
  Status inputs;
  for (WorkItem* item : group)
    if (item->entry && item->entry->wait_inputs && inputs.ok()) inputs = item->entry->wait_inputs();
  CollectiveResult result;
  Status status = Execute(group, &result);
  if (status.ok()) status = memory_->Finish();
  if (status.ok()) status = inputs;
  const Response& response = group.front()->response;
  if (response.kind == Response::Kind::kExecute && response.request.op_type != OpType::kAllreduce)
    Mark(group, CollectivePhase(response.request.op_type), start);
  const auto executed = Timeline::Clock::now();
  for (WorkItem* item : group)
    if (item->entry && item->entry->done) item->entry->done(status, result);
  if (timeline_->active()) Mark(group, "COMPLETE", executed);
}

Status Executor::Execute(std::vector<WorkItem*>& group, CollectiveResult* result) {
  WorkItem& first = *group.front();
  const Response& response = first.response;
  if (response.kind == Response::Kind::kError) return Status::Mismatch(response.error);
  if (response.kind == Response::Kind::kArgumentError)
    return Status::InvalidArgument(response.error);
  if (response.kind == Response::Kind::kJoinDone) {
    result->last_joined_rank = response.last_joined_rank;
    return Status::Ok();
  }
  if (!first.carried.empty()) return FinishCarried(first);
  switch (response.request.op_type) {
    case OpType::kAllreduce: return Allreduce(group);
    case OpType::kAllgather: return Allgather(first);
    case OpType::kBroadcast: return Broadcast(first);
    case OpType::kAlltoall: return Alltoall(first, result);
    case OpType::kReducescatter: return Reducescatter(first);
    case OpType::kBarrier:
    case OpType::kJoin: break;  // negotiation itself synchronized the ranks
  }
  return Status::Ok();
}

Status Executor::Allreduce(std::vector<WorkItem*>& group) {
  const Request& sig = group.front()->response.request;
  ReduceOptions options;
  options.op = sig.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : sig.reduce_op;
  // Agreed flag of a lone tensor; a rank without the entry (joined) reduces the op's identity
  // in place.
  options.any_out_of_place = group.size() == 1 && sig.shapes.size() == 1 && sig.out_of_place;

  // Decided from negotiated facts only, so that every rank (a joined one too) takes the same
  // path: the spans scale before handing results over, the other paths after. A group whose
  // wire type is not its dtype (WireType: Min/Max of halves) is widened in the buffer, and may
  // fuse float32 with halves.
  const DataType wire = WireType(sig.dtype, options.op);
  bool spans = wire == sig.dtype && backend_->ReducesSpans(sig.dtype, options.op);
  for (const WorkItem* item : group) spans = spans && item->response.request.dtype == sig.dtype;
  if (spans) return AllreduceSpans(group, options);

  // Fast path: one tensor in its own dtype, reduced from its input into its output.
  if (group.size() == 1 && sig.shapes.size() == 1 && wire == sig.dtype && group[0]->entry) {
    WorkItem& item = *group[0];
    int64_t count = NumElements(sig.shapes[0]);
    void* out;
    KERASHVD_RETURN_IF_ERROR(Output(item, 0, sig.shapes[0], &out));
    const void* in = item.entry->inputs[0];
    if (sig.prescale != 1.0) {
      KERASHVD_RETURN_IF_ERROR(memory_->ScaleCopy(in, out, count, sig.dtype, sig.prescale));
      in = out;
    }
    auto t = Timeline::Clock::now();
    KERASHVD_RETURN_IF_ERROR(backend_->Allreduce(in, out, count, sig.dtype, options));
    double post = PostscaleOf(sig);
    if (post != 1.0) KERASHVD_RETURN_IF_ERROR(memory_->ScaleCopy(out, out, count, sig.dtype, post));
    Mark(group, "ALLREDUCE", t);
    return Status::Ok();
  }

  const int64_t wire_size = DataTypeSize(wire);
  int64_t total = 0;
  for (WorkItem* item : group) total += FusedBytes(item->response.request);
  void* fused;
  KERASHVD_RETURN_IF_ERROR(memory_->FusionBuffer(total, &fused));
  char* buffer = static_cast<char*>(fused);

  auto t = Timeline::Clock::now();
  int64_t offset = 0;
  for (WorkItem* item : group) {
    const Request& r = item->response.request;
    for (size_t i = 0; i < r.shapes.size(); ++i) {
      int64_t n = NumElements(r.shapes[i]);
      char* dst = buffer + offset;
      Status s;
      if (!item->entry) s = memory_->FillIdentity(dst, n, wire, options.op);
      else if (r.dtype != wire)
        s = memory_->HalfToFloat(item->entry->inputs[i], reinterpret_cast<float*>(dst), n, r.dtype,
                                 r.prescale);
      else s = memory_->ScaleCopy(item->entry->inputs[i], dst, n, r.dtype, r.prescale);
      KERASHVD_RETURN_IF_ERROR(s);
      offset += n * wire_size;
    }
  }
  t = Mark(group, "MEMCPY_IN_FUSION_BUFFER", t);
  KERASHVD_RETURN_IF_ERROR(backend_->Allreduce(buffer, buffer, total / wire_size, wire, options));
  t = Mark(group, "ALLREDUCE", t);
  offset = 0;
  for (WorkItem* item : group) {
    const Request& r = item->response.request;
    const double post = PostscaleOf(r);
    for (size_t i = 0; i < r.shapes.size(); ++i) {
      int64_t n = NumElements(r.shapes[i]);
      const char* src = buffer + offset;
      offset += n * wire_size;
      if (!item->entry) continue;
      void* out;
      KERASHVD_RETURN_IF_ERROR(Output(*item, i, r.shapes[i], &out));
      KERASHVD_RETURN_IF_ERROR(
          r.dtype != wire ? memory_->FloatToHalf(reinterpret_cast<const float*>(src), out, n, r.dtype, post)
                          : memory_->ScaleCopy(src, out, n, r.dtype, post));
    }
  }
  Mark(group, "MEMCPY_OUT_FUSION_BUFFER", t);
  return Status::Ok();
}

Status Executor::FinishCarried(WorkItem& item) {
  const Request& sig = item.response.request;
  const int64_t count = NumElements(sig.shapes[0]);
  void* out;
  KERASHVD_RETURN_IF_ERROR(Output(item, 0, sig.shapes[0], &out));
  const auto t = Timeline::Clock::now();
  const double post = PostscaleOf(sig);
  KERASHVD_RETURN_IF_ERROR(
      post != 1.0 ? memory_->ScaleCopy(item.carried.data(), out, count, sig.dtype, post)
                  : memory_->Copy(out, item.carried.data(), count * DataTypeSize(sig.dtype)));
  Mark({&item}, "CARRIED", t);
  return Status::Ok();
}

// The fused group handed to the backend as spans: each tensor reduced from its input into its
// output, scaled there, with no pass through the fusion buffer. Prescaled inputs are scaled
// into the output first (which the reduction then reads in place); a joined rank's spans are
// the op's identity in the fusion buffer, reduced in place.
Status Executor::AllreduceSpans(std::vector<WorkItem*>& group, const ReduceOptions& options) {
  const Request& sig = group.front()->response.request;
  int64_t joined_bytes = 0;
  for (WorkItem* item : group)
    if (!item->entry) joined_bytes += FusedBytes(item->response.request);
  char* identity = nullptr;
  if (joined_bytes > 0) {
    void* fused;
    KERASHVD_RETURN_IF_ERROR(memory_->FusionBuffer(joined_bytes, &fused));
    identity = static_cast<char*>(fused);
  }
  auto t = Timeline::Clock::now();
  std::vector<AllreduceSpan> spans;
  for (WorkItem* item : group) {
    const Request& r = item->response.request;
    const double post = PostscaleOf(r);
    for (size_t i = 0; i < r.shapes.size(); ++i) {
      const int64_t n = NumElements(r.shapes[i]);
      if (!item->entry) {
        KERASHVD_RETURN_IF_ERROR(memory_->FillIdentity(identity, n, sig.dtype, options.op));
        spans.push_back({identity, identity, n, post});
        identity += n * DataTypeSize(sig.dtype);
        continue;
      }
      void* out;
      KERASHVD_RETURN_IF_ERROR(Output(*item, i, r.shapes[i], &out));
      const void* in = item->entry->inputs[i];
      if (r.prescale != 1.0) {
        KERASHVD_RETURN_IF_ERROR(memory_->ScaleCopy(in, out, n, r.dtype, r.prescale));
        in = out;
      }
      spans.push_back({in, out, n, post});
    }
  }
  KERASHVD_RETURN_IF_ERROR(backend_->AllreduceSpans(spans, sig.dtype, options));
  Mark(group, "ALLREDUCE", t);
  return Status::Ok();
}

Status Executor::Allgather(WorkItem& item) {
  const Request& sig = item.response.request;
  const size_t k = sig.shapes.size();
  std::vector<int64_t> mine(k, 0), all(k * size_);
  if (item.entry)
    for (size_t i = 0; i < k; ++i) mine[i] = item.entry->request.shapes[i][0];
  KERASHVD_RETURN_IF_ERROR(backend_->AllgatherInt64(mine.data(), k, all.data()));
  for (size_t i = 0; i < k; ++i) {
    const int64_t row_bytes = RowElements(sig.shapes[i]) * DataTypeSize(sig.dtype);
    std::vector<int64_t> recv_bytes(size_);
    int64_t rows = 0;
    for (int r = 0; r < size_; ++r) {
      recv_bytes[r] = all[r * k + i] * row_bytes;
      rows += all[r * k + i];
    }
    void* out;
    KERASHVD_RETURN_IF_ERROR(Output(item, i, WithFirstDim(sig.shapes[i], rows), &out));
    const void* in = item.entry ? item.entry->inputs[i] : nullptr;
    KERASHVD_RETURN_IF_ERROR(backend_->Allgatherv(in, out, recv_bytes));
  }
  return Status::Ok();
}

Status Executor::Broadcast(WorkItem& item) {
  const Request& sig = item.response.request;
  for (size_t i = 0; i < sig.shapes.size(); ++i) {
    int64_t bytes = NumElements(sig.shapes[i]) * DataTypeSize(sig.dtype);
    void* out;
    KERASHVD_RETURN_IF_ERROR(Output(item, i, sig.shapes[i], &out));
    if (rank_ == sig.root_rank) {
      if (item.entry) KERASHVD_RETURN_IF_ERROR(memory_->Copy(out, item.entry->inputs[i], bytes));
      else KERASHVD_RETURN_IF_ERROR(memory_->Zero(out, bytes));
    }
    KERASHVD_RETURN_IF_ERROR(backend_->Broadcast(out, bytes, BroadcastOptions{sig.root_rank}));
  }
  return Status::Ok();
}

Status Executor::Alltoall(WorkItem& item, CollectiveResult* result) {
  const Request& sig = item.response.request;
  const int64_t row_bytes = RowElements(sig.shapes[0]) * DataTypeSize(sig.dtype);
  std::vector<int64_t> send_rows(size_, 0), recv_rows(size_);
  if (item.entry) send_rows = item.entry->splits;
  KERASHVD_RETURN_IF_ERROR(backend_->AlltoallInt64(send_rows.data(), recv_rows.data()));
  std::vector<int64_t> send_bytes(size_), recv_bytes(size_);
  int64_t rows = 0;
  for (int r = 0; r < size_; ++r) {
    send_bytes[r] = send_rows[r] * row_bytes;
    recv_bytes[r] = recv_rows[r] * row_bytes;
    rows += recv_rows[r];
  }
  void* out;
  KERASHVD_RETURN_IF_ERROR(Output(item, 0, WithFirstDim(sig.shapes[0], rows), &out));
  const void* in = item.entry ? item.entry->inputs[0] : nullptr;
  KERASHVD_RETURN_IF_ERROR(backend_->Alltoallv(in, send_bytes, out, recv_bytes));
  result->received_splits = recv_rows;
  return Status::Ok();
}

Status Executor::Reducescatter(WorkItem& item) {
  const Request& sig = item.response.request;
  const ReduceOptions options{sig.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : sig.reduce_op};
  const DataType wire = WireType(sig.dtype, options.op);
  const bool widened = wire != sig.dtype;
  const int64_t wire_size = DataTypeSize(wire);
  const double post = PostscaleOf(sig);
  for (size_t i = 0; i < sig.shapes.size(); ++i) {
    const Shape& shape = sig.shapes[i];
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t row_elems = RowElements(shape);
    const int64_t n = NumElements(shape);
    std::vector<int64_t> counts(size_);
    for (int r = 0; r < size_; ++r) counts[r] = ScatterRows(rows, r, size_) * row_elems;
    const int64_t mine = counts[rank_];
    void* out;
    KERASHVD_RETURN_IF_ERROR(Output(item, i, WithFirstDim(shape, ScatterRows(rows, rank_, size_)), &out));

    // Stage the input in the fusion buffer unless it can be reduced straight from the input.
    const bool direct = !widened && sig.prescale == 1.0 && item.entry;
    void* staging;
    KERASHVD_RETURN_IF_ERROR(memory_->FusionBuffer((n + mine) * wire_size, &staging));
    char* buffer = static_cast<char*>(staging);
    const void* send = direct ? item.entry->inputs[i] : buffer;
    if (!direct) {
      Status s;
      if (!item.entry) s = memory_->FillIdentity(buffer, n, wire, options.op);
      else if (widened)
        s = memory_->HalfToFloat(item.entry->inputs[i], reinterpret_cast<float*>(buffer), n,
                                 sig.dtype, sig.prescale);
      else s = memory_->ScaleCopy(item.entry->inputs[i], buffer, n, sig.dtype, sig.prescale);
      KERASHVD_RETURN_IF_ERROR(s);
    }
    void* recv = widened ? buffer + n * wire_size : out;
    KERASHVD_RETURN_IF_ERROR(backend_->ReduceScatter(send, recv, counts, wire, options));
    if (widened)
      KERASHVD_RETURN_IF_ERROR(
          memory_->FloatToHalf(reinterpret_cast<const float*>(recv), out, mine, sig.dtype, post));
    else if (post != 1.0) KERASHVD_RETURN_IF_ERROR(memory_->ScaleCopy(out, out, mine, sig.dtype, post));
  }
  return Status::Ok();
}

}  // namespace kerashvd
