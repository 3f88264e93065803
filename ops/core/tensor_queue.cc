#include "tensor_queue.h"

namespace kerashvd {

void TensorQueue::Submit(TensorEntry entry) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back(std::move(entry));
    ++submissions_;
  }
  cv_.notify_one();
}

std::deque<TensorEntry> TensorQueue::TakeAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::deque<TensorEntry> out;
  out.swap(entries_);
  woken_ = false;
  return out;
}

void TensorQueue::WaitForWork(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, timeout, [this] { return !entries_.empty() || woken_; });
}

uint64_t TensorQueue::submissions() {
  std::lock_guard<std::mutex> lock(mutex_);
  return submissions_;
}

bool TensorQueue::WaitForSubmissionAfter(uint64_t seen, std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return submissions_ != seen || woken_; });
}

void TensorQueue::Wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
  }
  cv_.notify_one();
}

}  // namespace kerashvd
