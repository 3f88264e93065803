#include "tensor_queue.h"

#include <thread>

namespace kerashvd {

void TensorQueue::Submit(TensorEntry entry) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back(std::move(entry));
    ++submissions_;
    pending_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

std::deque<TensorEntry> TensorQueue::TakeAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::deque<TensorEntry> out;
  out.swap(entries_);
  woken_ = false;
  pending_.store(false, std::memory_order_release);
  return out;
}

bool TensorQueue::SpinForWork(std::chrono::microseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  while (!pending_.load(std::memory_order_acquire)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
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
    pending_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

}  // namespace kerashvd
