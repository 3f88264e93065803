// TimedBackend: a Backend that hands every call to another one and adds the time spent in it
// to a StragglerStats (the straggler report's "transfer" time). Two clock reads per call.
#pragma once

#include <memory>
#include <utility>

#include "backend/backend.h"
#include "straggler_stats.h"

namespace kerashvd {

class TimedBackend : public Backend {
 public:
  TimedBackend(std::unique_ptr<Backend> inner, StragglerStats* stats)
      : inner_(std::move(inner)), stats_(stats) {}
  const char* name() const override { return inner_->name(); }
  // Time inside the inner backend's calls so far, for the caller's own bookkeeping.
  StragglerStats::Clock::duration total() const { return total_; }
  // Starts a group: first_start() and last_end() are then the start of its first call and
  // the end of its last one (a default time_point while it made none).
  void StartGroup() { first_start_ = last_end_ = StragglerStats::Clock::time_point(); }
  StragglerStats::Clock::time_point first_start() const { return first_start_; }
  StragglerStats::Clock::time_point last_end() const { return last_end_; }

  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                   const ReduceOptions& options) override {
    return Timed([&] { return inner_->Allreduce(send, recv, count, dtype, options); });
  }
  bool ReducesSpans(DataType dtype, ReduceOp op) const override {
    return inner_->ReducesSpans(dtype, op);
  }
  Status AllreduceSpans(const std::vector<AllreduceSpan>& spans, DataType dtype,
                        const ReduceOptions& options) override {
    return Timed([&] { return inner_->AllreduceSpans(spans, dtype, options); });
  }
  Status Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) override {
    return Timed([&] { return inner_->Allgatherv(send, recv, recv_bytes); });
  }
  Status Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) override {
    return Timed([&] { return inner_->Broadcast(buffer, bytes, options); });
  }
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override {
    return Timed([&] { return inner_->Alltoallv(send, send_bytes, recv, recv_bytes); });
  }
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, const ReduceOptions& options) override {
    return Timed([&] { return inner_->ReduceScatter(send, recv, recv_counts, dtype, options); });
  }
  Status AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) override {
    return Timed([&] { return inner_->AllgatherInt64(send, count, recv); });
  }
  Status AlltoallInt64(const int64_t* send, int64_t* recv) override {
    return Timed([&] { return inner_->AlltoallInt64(send, recv); });
  }

 private:
  template <typename Call>
  Status Timed(Call call) {
    const auto start = StragglerStats::Clock::now();
    if (first_start_ == StragglerStats::Clock::time_point()) first_start_ = start;
    Status status = call();
    last_end_ = StragglerStats::Clock::now();
    const auto spent = last_end_ - start;
    total_ += spent;
    stats_->AddTransfer(spent);
    return status;
  }

  std::unique_ptr<Backend> inner_;
  StragglerStats* stats_;
  StragglerStats::Clock::duration total_{0};
  StragglerStats::Clock::time_point first_start_;
  StragglerStats::Clock::time_point last_end_;
};

}  // namespace kerashvd
