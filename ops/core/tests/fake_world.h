// FakeWorld: N ranks that are threads of this process, for testing the engine's protocols
// without MPI (in the manner of Gloo's test/base_test.h: one thread per rank, started by
// RunRanks in rank_threads_test.h, each with its own view of a shared in-memory transport).
//
// The one primitive is Exchange: every rank puts a string in its slot, waits until all ranks
// have, reads every slot, and waits again until all have read (so nobody overwrites a slot
// that is still being read). The collectives of a ControlPlane are built on it.
//
// A rank that does not come (it "died": the test simply never calls in on that thread)
// makes the others' Exchange fail with Aborted after the timeout, or as soon as the rank's
// AbortFlag is set, like the MPI control plane. After a failed exchange the world is broken:
// every later exchange fails at once, as a real communicator that lost a peer would.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../abort_flag.h"
#include "../control_plane.h"
#include "../group.h"

namespace kerashvd {
namespace testing {

class FakeWorld {
 public:
  explicit FakeWorld(int size) : size_(size), slots_(size) {}
  int size() const { return size_; }
  // Collective over all ranks: `received` gets every rank's `send`, in rank order.
  Status Exchange(int rank, const std::string& send, std::vector<std::string>* received,
                  std::chrono::milliseconds timeout, const AbortFlag* abort, const char* what);
  // The world of the ranks that passed `color` to split number `split` of this world (the
  // first of them to ask creates it).
  std::shared_ptr<FakeWorld> SubWorld(uint64_t split, int color, int size);

 private:
  // Waits until `arrived_` reaches size_ for generation `generation`; false on timeout/abort.
  bool Barrier(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline,
               const AbortFlag* abort);
  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> slots_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
  std::map<std::pair<uint64_t, int>, std::shared_ptr<FakeWorld>> sub_worlds_;
};

// Group (../group.h) for one rank of a FakeWorld. Split and Duplicate give each new group a
// FakeWorld of its own; the lane transport it makes is a FakeControlPlane and a FakeBackend
// on its world; it has no GPU plane.
class FakeGroup : public Group {
 public:
  FakeGroup(std::shared_ptr<FakeWorld> world, int rank,
            std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
            const AbortFlag* abort = nullptr)
      : world_(std::move(world)), rank_(rank), timeout_(timeout), abort_(abort) {}
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  // One node: local ranks are the ranks.
  Topology topology() const override;
  Status Allgather(const std::vector<uint64_t>& words, const char* what,
                   std::vector<uint64_t>* all) override;
  Status Split(int color, std::unique_ptr<Group>* out) override;
  Status Duplicate(std::unique_ptr<Group>* out) override { return Split(0, out); }
  LaneTransport MakeLaneTransport(const Config& config, const std::string& label,
                                  int world_rank0) override;
  Status CreateGpuPlane(Timeline*, int, double, std::unique_ptr<GpuPlane>*) override {
    return Status::Unimplemented("the fake group has no GPU plane");
  }
  void MarkBroken() override { marked_broken_ = true; }
  bool marked_broken() const { return marked_broken_; }

 private:
  std::shared_ptr<FakeWorld> world_;
  int rank_;
  std::chrono::milliseconds timeout_;
  const AbortFlag* abort_;
  uint64_t splits_ = 0;
  std::atomic<bool> marked_broken_{false};
};

// The negotiation's ControlPlane for one rank of a FakeWorld.
class FakeControlPlane : public ControlPlane {
 public:
  FakeControlPlane(FakeWorld* world, int rank,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                   const AbortFlag* abort = nullptr)
      : world_(world), rank_(rank), timeout_(timeout), abort_(abort) {}
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  Status AllreduceBitwiseAnd(uint64_t* words, int count) override;
  Status AllreduceCarry(uint64_t* message, int count) override;
  Status GatherToRoot(const std::string& send, std::vector<std::string>* received) override;
  Status BroadcastFromRoot(std::string* data) override;

 private:
  FakeWorld* world_;
  int rank_;
  std::chrono::milliseconds timeout_;
  const AbortFlag* abort_;
};

}  // namespace testing
}  // namespace kerashvd
