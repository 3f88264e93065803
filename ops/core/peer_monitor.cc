#include "peer_monitor.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

namespace kerashvd {
namespace {

enum Message : uint8_t { kHeartbeat = 0, kGoodbye = 1, kFailed = 2 };
constexpr size_t kMessageBytes = 5;
using Clock = std::chrono::steady_clock;

std::string LocalAddress(bool single_host) {
  if (single_host) return "127.0.0.1";
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "127.0.0.1";
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, nullptr, &hints, &found) != 0 || !found) return host;
  char text[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof(text));
  freeaddrinfo(found);
  return text;
}

bool ReadExact(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

PeerMonitor::PeerMonitor(ControlPlane* control, double peer_timeout_seconds, bool single_host,
                         AbortFlag* abort, FailureCallback on_failure)
    : control_(control), timeout_seconds_(peer_timeout_seconds), single_host_(single_host),
      abort_(abort), on_failure_(std::move(on_failure)) {}

Status PeerMonitor::Start() {
  const int rank = control_->rank(), size = control_->size();
  if (size == 1) return Status::Ok();
  std::string address;
  if (rank == 0) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = single_host_ ? htonl(INADDR_LOOPBACK) : htonl(INADDR_ANY);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, size) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return Status::Internal(std::string("peer monitor: cannot listen: ") + std::strerror(errno));
    address = LocalAddress(single_host_) + ":" + std::to_string(ntohs(addr.sin_port));
  }
  KERASHVD_RETURN_IF_ERROR(control_->BroadcastFromRoot(&address));

  if (rank == 0) {
    fds_.assign(size, -1);
    for (int accepted = 0; accepted < size - 1; ++accepted) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      int32_t peer = -1;
      if (fd < 0 || !ReadExact(fd, &peer, sizeof(peer)) || peer <= 0 || peer >= size)
        return Status::Internal("peer monitor: a rank failed to connect to rank 0");
      fds_[peer] = fd;
    }
    for (int r = 0; r < size; ++r) peer_ranks_.push_back(r);
  } else {
    size_t colon = address.rfind(':');
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints,
                    &found) != 0 || !found)
      return Status::Internal("peer monitor: cannot resolve rank 0's address " + address);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
    int32_t me = rank;
    if (rc != 0 || ::send(fd, &me, sizeof(me), MSG_NOSIGNAL) != sizeof(me))
      return Status::Internal("peer monitor: cannot connect to rank 0 at " + address + ": " +
                              std::strerror(errno) +
                              ". Ranks must reach rank 0's host over TCP (check firewalls).");
    fds_ = {fd};
    peer_ranks_ = {0};
  }
  for (int fd : fds_) {
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void PeerMonitor::Send(int fd, uint8_t type, int32_t value) {
  if (fd < 0) return;
  char message[kMessageBytes];
  message[0] = static_cast<char>(type);
  std::memcpy(message + 1, &value, sizeof(value));
  std::lock_guard<std::mutex> lock(send_mutex_);
  ::send(fd, message, kMessageBytes, MSG_NOSIGNAL);
}

void PeerMonitor::Stop() {
  if (!thread_.joinable()) return;
  for (int fd : fds_) Send(fd, kGoodbye, control_->rank());
  stop_ = true;
  thread_.join();
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  fds_.clear();
  listen_fd_ = -1;
}

void PeerMonitor::Fail(int rank, const std::string& what) {
  if (reported_) return;
  reported_ = true;
  if (control_->rank() == 0)
    for (int fd : fds_) Send(fd, kFailed, rank);
  on_failure_(rank, what);
}

void PeerMonitor::Loop() {
  const size_t n = fds_.size();
  std::vector<Clock::time_point> last_heard(n, Clock::now());
  std::vector<bool> gone(n, false);  // said goodbye, or already reported
  const auto beat = std::chrono::duration<double>(kHeartbeatSeconds);
  auto last_beat = Clock::now() - std::chrono::duration_cast<Clock::duration>(beat);
  while (!stop_) {
    if (Clock::now() - last_beat >= beat) {
      for (int fd : fds_) Send(fd, kHeartbeat, control_->rank());
      last_beat = Clock::now();
    }
    std::vector<pollfd> polled;
    std::vector<size_t> index;
    for (size_t i = 0; i < n; ++i)
      if (fds_[i] >= 0 && !gone[i]) {
        polled.push_back({fds_[i], POLLIN, 0});
        index.push_back(i);
      }
    if (polled.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ::poll(polled.data(), polled.size(), 100);
    bool silent = false;
    for (size_t k = 0; k < polled.size(); ++k) {
      const size_t i = index[k];
      const int peer = peer_ranks_[i];
      if (polled[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        char message[kMessageBytes];
        if (!ReadExact(fds_[i], message, kMessageBytes)) {
          gone[i] = true;
          if (!stop_) Fail(peer, "exited or was killed (its connection closed without a goodbye)");
          continue;
        }
        last_heard[i] = Clock::now();
        int32_t value;
        std::memcpy(&value, message + 1, sizeof(value));
        if (message[0] == kGoodbye) gone[i] = true;
        if (message[0] == kFailed && !stop_)
          Fail(value, "exited, was killed or stopped responding (reported by rank 0)");
      } else {
        const double quiet = std::chrono::duration<double>(Clock::now() - last_heard[i]).count();
        silent = silent || quiet > kSuspectSeconds;
        if (timeout_seconds_ > 0 && quiet > timeout_seconds_) {
          gone[i] = true;
          std::ostringstream what;
          what << "stopped responding (no heartbeat for " << timeout_seconds_ << " s)";
          if (!stop_) Fail(peer, what.str());
        }
      }
    }
    if (abort_) abort_->SetSuspicion(silent);
  }
}

}  // namespace kerashvd
