// FakeBackend: the data plane of one rank of a FakeWorld (fake_world.h), enough to run a
// lane end to end in the unit tests: allreduce of float32, float64 and int32 (sum, min, max)
// and the int64 metadata allgather. Every other operation is Unimplemented, naming the fake.
#pragma once

#include "../backend/backend.h"
#include "fake_world.h"

namespace kerashvd {
namespace testing {

class FakeBackend : public Backend {
 public:
  FakeBackend(FakeWorld* world, int rank, const AbortFlag* abort = nullptr)
      : world_(world), rank_(rank), abort_(abort) {}
  const char* name() const override { return "fake"; }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                   const ReduceOptions& options) override;
  Status Allgatherv(const void*, void*, const std::vector<int64_t>&) override {
    return Unimplemented("Allgatherv");
  }
  Status Broadcast(void*, int64_t, const BroadcastOptions&) override {
    return Unimplemented("Broadcast");
  }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*,
                   const std::vector<int64_t>&) override {
    return Unimplemented("Alltoallv");
  }
  Status ReduceScatter(const void*, void*, const std::vector<int64_t>&, DataType,
                       const ReduceOptions&) override {
    return Unimplemented("ReduceScatter");
  }
  Status AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) override;
  Status AlltoallInt64(const int64_t*, int64_t*) override { return Unimplemented("AlltoallInt64"); }

 private:
  static Status Unimplemented(const char* what) {
    return Status::Unimplemented(std::string(what) + " is not implemented by the fake backend");
  }
  FakeWorld* world_;
  int rank_;
  const AbortFlag* abort_;
};

}  // namespace testing
}  // namespace kerashvd
