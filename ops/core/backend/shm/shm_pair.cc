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

template <typename Fn>
void ShmPair::ForPieces(const std::vector<AllreduceSpan>& spans,
                        const std::vector<int64_t>& starts, int64_t from, int64_t count, Fn fn) {
  if (count <= 0) return;
  // The span holding `from`: the last one starting at or before it (empty spans skipped).
  size_t k = std::upper_bound(starts.begin(), starts.end(), from) - starts.begin() - 1;
  for (int64_t done = 0; done < count; ++k) {
    const int64_t at = from + done - starts[k];
    const int64_t n = std::min(spans[k].count - at, count - done);
    if (n <= 0) continue;
    fn(spans[k], at, n, done);
    done += n;
  }
}

Status ShmPair::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                          ReduceOp op) {
  return Allreduce({AllreduceSpan{send, recv, count, 1.0}}, dtype, op);
}

Status ShmPair::Allreduce(const std::vector<AllreduceSpan>& spans, DataType dtype, ReduceOp op) {
  const int64_t width = DataTypeSize(dtype);
  std::vector<int64_t> starts(spans.size());
  int64_t count = 0;
  for (size_t k = 0; k < spans.size(); ++k) {
    starts[k] = count;
    count += spans[k].count;
  }
  // An even number of elements per chunk, so that each half fits its box.
  const int64_t per_chunk = (kChunkBytes / width) & ~int64_t{1};
  const int peer = 1 - rank_;
  for (int64_t start = 0; start < count; start += per_chunk) {
    const int64_t n = std::min(per_chunk, count - start);
    const int64_t first = (n + 1) / 2;  // rank 0's half: [0, first); rank 1's: [first, n)
    const int64_t mine_at = start + (rank_ == 0 ? 0 : first), mine = rank_ == 0 ? first : n - first;
    const int64_t theirs_at = start + (rank_ == 0 ? first : 0), theirs = n - mine;
    const int b = static_cast<int>(chunk_ & 1);
    const uint32_t arrived = 2 * chunk_ + 1, reduced = 2 * chunk_ + 2;
    ++chunk_;

    char* outbox = Box(rank_, b, 0);
    ForPieces(spans, starts, theirs_at, theirs, [&](const AllreduceSpan& s, int64_t at, int64_t len, int64_t off) {
      std::memcpy(outbox + off * width, static_cast<const char*>(s.send) + at * width, len * width);
    });
    Publish(arrived);
    KERASHVD_RETURN_IF_ERROR(WaitPeer(arrived));
    const char* peer_in = Box(peer, b, 0);
    char* result = Box(rank_, b, 1);
    ForPieces(spans, starts, mine_at, mine, [&](const AllreduceSpan& s, int64_t at, int64_t len, int64_t off) {
      PairReduce(static_cast<const char*>(s.send) + at * width, peer_in + off * width,
                 static_cast<char*>(s.recv) + at * width, result + off * width, len, dtype, op,
                 s.postscale);
    });
    Publish(reduced);
    KERASHVD_RETURN_IF_ERROR(WaitPeer(reduced));
    const char* peer_result = Box(peer, b, 1);
    ForPieces(spans, starts, theirs_at, theirs, [&](const AllreduceSpan& s, int64_t at, int64_t len, int64_t off) {
      std::memcpy(static_cast<char*>(s.recv) + at * width, peer_result + off * width, len * width);
    });
  }
  return Status::Ok();
}

}  // namespace kerashvd
