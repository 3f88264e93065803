#include "fake_world.h"

#include <cstring>

#include "../carry.h"
#include "../lane_transport.h"
#include "fake_backend.h"

namespace kerashvd {
namespace testing {

bool FakeWorld::Barrier(std::unique_lock<std::mutex>& lock,
                        std::chrono::steady_clock::time_point deadline, const AbortFlag* abort) {
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  // Woken by the last arrival, a broken world, or every millisecond to look at the abort flag.
  while (generation_ == generation && !broken_) {
    if ((abort && abort->is_set()) || std::chrono::steady_clock::now() >= deadline) {
      broken_ = true;
      cv_.notify_all();
      return false;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(1));
  }
  return generation_ != generation;
}

Status FakeWorld::Exchange(int rank, const std::string& send, std::vector<std::string>* received,
                           std::chrono::milliseconds timeout, const AbortFlag* abort,
                           const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  auto failed = [&] {
    if (abort && abort->is_set()) return abort->status();
    return Status::Aborted(std::string("no answer from the other ranks in ") + what +
                           " (fake world, rank " + std::to_string(rank) + ")");
  };
  if (broken_) return failed();
  slots_[rank] = send;
  if (!Barrier(lock, deadline, abort)) return failed();
  *received = slots_;
  if (!Barrier(lock, deadline, abort)) return failed();
  return Status::Ok();
}

std::shared_ptr<FakeWorld> FakeWorld::SubWorld(uint64_t split, int color, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& world = sub_worlds_[{split, color}];
  if (!world) world = std::make_shared<FakeWorld>(size);
  return world;
}

Topology FakeGroup::topology() const {
  Topology t;
  t.rank = t.local_rank = rank_;
  t.size = t.local_size = world_->size();
  return t;
}

LaneTransport FakeGroup::MakeLaneTransport(const Config&, const std::string&, int) {
  LaneTransport transport;
  transport.control = std::make_unique<FakeControlPlane>(world_.get(), rank_, timeout_, abort_);
  transport.backend = std::make_unique<FakeBackend>(world_.get(), rank_, abort_);
  return transport;
}

Status FakeGroup::Allgather(const std::vector<uint64_t>& words, const char* what,
                            std::vector<uint64_t>* all) {
  std::string send(reinterpret_cast<const char*>(words.data()), sizeof(uint64_t) * words.size());
  std::vector<std::string> received;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(rank_, send, &received, timeout_, abort_, what));
  all->clear();
  for (const std::string& bytes : received) {
    const size_t at = all->size();
    all->resize(at + bytes.size() / sizeof(uint64_t));
    std::memcpy(all->data() + at, bytes.data(), bytes.size());
  }
  return Status::Ok();
}

Status FakeGroup::Split(int color, std::unique_ptr<Group>* out) {
  std::vector<uint64_t> colors;
  KERASHVD_RETURN_IF_ERROR(Allgather({static_cast<uint64_t>(static_cast<int64_t>(color))},
                                     "split", &colors));
  const uint64_t split = splits_++;
  out->reset();
  if (color < 0) return Status::Ok();
  int size = 0, rank = 0;
  for (int r = 0; r < world_->size(); ++r) {
    if (static_cast<int64_t>(colors[r]) != color) continue;
    if (r < rank_) ++rank;
    ++size;
  }
  *out = std::make_unique<FakeGroup>(world_->SubWorld(split, color, size), rank, timeout_, abort_);
  return Status::Ok();
}

Status FakeControlPlane::AllreduceBitwiseAnd(uint64_t* words, int count) {
  std::string send(reinterpret_cast<const char*>(words), sizeof(uint64_t) * count);
  std::vector<std::string> all;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(rank_, send, &all, timeout_, abort_,
                                            "negotiation (bitwise allreduce)"));
  for (const std::string& other : all) {
    if (other.size() != send.size())
      return Status::Internal("ranks passed different word counts to AllreduceBitwiseAnd");
    for (int i = 0; i < count; ++i) {
      uint64_t w;
      std::memcpy(&w, other.data() + sizeof(uint64_t) * i, sizeof(w));
      words[i] &= w;
    }
  }
  return Status::Ok();
}

Status FakeControlPlane::AllreduceCarry(uint64_t* message, int count) {
  std::string send(reinterpret_cast<const char*>(message), sizeof(uint64_t) * count);
  std::vector<std::string> all;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(rank_, send, &all, timeout_, abort_,
                                            "negotiation (bitwise allreduce with carried data)"));
  // Combined from the last rank's message down to rank 0's, the same on every rank. That is
  // another order than FakeBackend's (rank 0 up), as an MPI library's order for a user-defined
  // operation can differ from its own sum's: the tests see which of the two reduced a value.
  std::vector<uint64_t> result(count);
  for (size_t r = all.size(); r-- > 0;) {
    if (all[r].size() != send.size())
      return Status::Internal("ranks passed different word counts to AllreduceCarry");
    if (r + 1 == all.size()) {
      std::memcpy(result.data(), all[r].data(), all[r].size());
      continue;
    }
    std::vector<uint64_t> other(count);
    std::memcpy(other.data(), all[r].data(), all[r].size());
    CombineCarry(other.data(), result.data());
  }
  std::memcpy(message, result.data(), sizeof(uint64_t) * count);
  return Status::Ok();
}

Status FakeControlPlane::GatherToRoot(const std::string& send, std::vector<std::string>* received) {
  std::vector<std::string> all;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(rank_, send, &all, timeout_, abort_,
                                            "negotiation (gather of requests)"));
  if (rank_ == 0) *received = std::move(all);
  return Status::Ok();
}

Status FakeControlPlane::BroadcastFromRoot(std::string* data) {
  std::vector<std::string> all;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(rank_, *data, &all, timeout_, abort_,
                                            "negotiation (broadcast of responses)"));
  *data = all[0];
  return Status::Ok();
}

}  // namespace testing
}  // namespace kerashvd
