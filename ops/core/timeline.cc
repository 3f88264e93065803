#include "timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace kerashvd {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

Status Timeline::Start(const std::string& path, int rank, int64_t max_bytes) {
  Stop();
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::InvalidArgument("cannot open timeline file '" + path + "': " + std::strerror(errno));
  const std::string head = "[\n]\n";
  if (::pwrite(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    ::close(fd);
    return Status::Internal("cannot write timeline file '" + path + "'");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
  rank_ = rank;
  max_bytes_ = max_bytes;
  end_offset_ = 2;  // after "[\n"
  first_event_ = true;
  truncated_ = false;
  stop_ = false;
  rows_.clear();
  pending_.clear();
  origin_ = Clock::now();
  std::ostringstream meta;
  meta << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank_
       << ", \"args\": {\"name\": \"rank " << rank_ << "\"}}";
  pending_.push_back(meta.str());
  pending_.push_back("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) +
                     ", \"tid\": 0, \"args\": {\"name\": \"engine cycles\"}}");
  active_ = true;
  writer_ = std::thread([this] { WriterLoop(); });
  return Status::Ok();
}

void Timeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!writer_.joinable()) return;
    active_ = false;
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int64_t Timeline::Micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

int Timeline::TensorRow(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_[tensor] = row;
  pending_.push_back("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) +
                     ", \"tid\": " + std::to_string(row) + ", \"args\": {\"name\": " +
                     JsonString(tensor) + "}}");
  return row;
}

void Timeline::Phase(const std::string& tensor, const char* phase, Clock::time_point start,
                     Clock::time_point end, const std::string& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (truncated_) return;
  std::ostringstream e;
  e << "{\"name\": \"" << phase << "\", \"ph\": \"X\", \"pid\": " << rank_
    << ", \"tid\": " << TensorRow(tensor) << ", \"ts\": " << Micros(start)
    << ", \"dur\": " << Micros(end) - Micros(start) << ", \"args\": {\"tensor\": " << JsonString(tensor)
    << (args.empty() ? "" : ", ") << args << "}}";
  pending_.push_back(e.str());
}

void Timeline::Cycle(Clock::time_point start, Clock::time_point end, size_t tensors, int64_t bytes) {
  Engine("CYCLE", start, end,
         "\"tensors\": " + std::to_string(tensors) + ", \"bytes\": " + std::to_string(bytes));
}

void Timeline::Engine(const char* name, Clock::time_point start, Clock::time_point end,
                      const std::string& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (truncated_) return;
  std::ostringstream e;
  e << "{\"name\": \"" << name << "\", \"ph\": \"X\", \"pid\": " << rank_
    << ", \"tid\": 0, \"ts\": " << Micros(start) << ", \"dur\": " << Micros(end) - Micros(start)
    << ", \"args\": {" << args << "}}";
  pending_.push_back(e.str());
}

void Timeline::WriterLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
    Flush();
  }
  Flush();
}

// Called with mutex_ held. Appends the pending events that still fit under max_bytes; when
// one does not, writes the TIMELINE_TRUNCATED marker instead and records nothing more.
void Timeline::Flush() {
  if (pending_.empty() || fd_ < 0 || truncated_) {
    pending_.clear();
    return;
  }
  const int64_t reserve = 512;  // room kept for the truncation marker
  std::string text;
  for (const std::string& e : pending_) {
    std::string piece = (first_event_ && text.empty() ? "" : ",\n") + e;
    if (end_offset_ + static_cast<int64_t>(text.size() + piece.size()) + reserve > max_bytes_) {
      truncated_ = true;
      break;
    }
    text += piece;
  }
  if (truncated_) {
    text += std::string(first_event_ && text.empty() ? "" : ",\n") +
            "{\"name\": \"TIMELINE_TRUNCATED\", \"ph\": \"i\", \"s\": \"g\", \"pid\": " +
            std::to_string(rank_) + ", \"tid\": 0, \"ts\": " + std::to_string(Micros(Clock::now())) +
            ", \"args\": {\"max_bytes\": " + std::to_string(max_bytes_) + "}}";
  }
  pending_.clear();
  if (text.empty()) return;
  first_event_ = false;
  std::string out = text + "\n]\n";
  if (::pwrite(fd_, out.data(), out.size(), end_offset_) == static_cast<ssize_t>(out.size()))
    end_offset_ += static_cast<int64_t>(text.size());
}

}  // namespace kerashvd
