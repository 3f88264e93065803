#include "shm_pair.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "pair_reduce.h"

namespace kerashvd {

ShmPair::ShmPair(std::unique_ptr<ShmSegment> segment, int rank, const AbortFlag* abort)
    : segment_(std::move(segment)), rank_(rank), abort_(abort) {
  static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
                "sequence numbers must be plain lock-free words to be shared across processes");
}

std::atomic<uint32_t>* ShmPair::Seq(int r) const {
  // One cache line each, so that a rank's polls do not slow the other's writes.
  return reinterpret_cast<std::atomic<uint32_t>*>(segment_->data() + 64 * r);
}

char* ShmPair::Box(int r, int b, int which) const {
  return segment_->data() + kHeaderBytes + ((r * 2 + b) * 2 + which) * (kChunkBytes / 2);
}

void ShmPair::Publish(uint32_t value) { Seq(rank_)->store(value, std::memory_order_release); }

Status ShmPair::WaitPeer(uint32_t value) {
  const std::atomic<uint32_t>* peer = Seq(1 - rank_);
  for (uint64_t polls = 0;; ++polls) {
    // Signed distance: correct across the wrap of the 32-bit counters.
    if (static_cast<int32_t>(peer->load(std::memory_order_acquire) - value) >= 0)
      return Status::Ok();
    if ((polls & 63) == 63 && abort_ && abort_->is_set()) return abort_->status();
    std::this_thread::yield();
  }
}

Status ShmPair::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                          ReduceOp op) {
  const int64_t width = DataTypeSize(dtype);
  // An even number of elements per chunk, so that each half fits its box.
  const int64_t per_chunk = (kChunkBytes / width) & ~int64_t{1};
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const int peer = 1 - rank_;
  for (int64_t start = 0; start < count; start += per_chunk) {
    const int64_t n = std::min(per_chunk, count - start);
    const int64_t first = (n + 1) / 2;  // rank 0's half: [0, first); rank 1's: [first, n)
    const int64_t mine_at = rank_ == 0 ? 0 : first, mine = rank_ == 0 ? first : n - first;
    const int64_t theirs_at = rank_ == 0 ? first : 0, theirs = n - mine;
    const char* chunk_in = in + start * width;
    char* chunk_out = out + start * width;
    const int b = static_cast<int>(chunk_ & 1);
    const uint32_t arrived = 2 * chunk_ + 1, reduced = 2 * chunk_ + 2;
    ++chunk_;

    std::memcpy(Box(rank_, b, 0), chunk_in + theirs_at * width, theirs * width);
    Publish(arrived);
    KERASHVD_RETURN_IF_ERROR(WaitPeer(arrived));
    PairReduce(chunk_in + mine_at * width, Box(peer, b, 0), chunk_out + mine_at * width,
               Box(rank_, b, 1), mine, dtype, op);
    Publish(reduced);
    KERASHVD_RETURN_IF_ERROR(WaitPeer(reduced));
    std::memcpy(chunk_out + theirs_at * width, Box(peer, b, 1), theirs * width);
  }
  return Status::Ok();
}

}  // namespace kerashvd
