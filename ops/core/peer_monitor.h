// PeerMonitor: finds out which rank died or froze, independently of MPI.
//
// MPI cannot tell a waiting rank which peer is gone: a collective with a dead rank simply never
// completes. So every rank keeps one TCP connection to rank 0 (a star), opened at init():
//   1. Rank 0 listens on an ephemeral port and broadcasts "host:port" over the control plane.
//   2. Every other rank connects and sends its rank number.
//   3. A monitor thread per rank sends a heartbeat every second and polls its socket(s):
//      - a connection that closes without a goodbye means that process exited or was killed
//        (the kernel closes a dead process's sockets, also after SIGKILL);
//      - no heartbeat for peer_timeout seconds means that process is frozen.
//      Rank 0 then tells every other rank "rank r failed"; a rank that loses rank 0 knows that
//      rank 0 failed. Each rank reports the failure once, through the callback, naming the rank.
//   4. Stop() sends a goodbye first, so an orderly shutdown is never taken for a failure.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control_plane.h"
#include "status.h"

namespace kerashvd {

class PeerMonitor {
 public:
  using FailureCallback = std::function<void(int failed_rank, const std::string& what)>;

  PeerMonitor(ControlPlane* control, double peer_timeout_seconds, bool single_host,
              FailureCallback on_failure);
  ~PeerMonitor() { Stop(); }
  // Collective: every rank must call it (after MPI is up).
  Status Start();
  void Stop();

 private:
  void Loop();
  void Fail(int rank, const std::string& what);
  void Send(int fd, uint8_t type, int32_t value);

  ControlPlane* control_;
  double timeout_seconds_;
  bool single_host_;
  FailureCallback on_failure_;
  int listen_fd_ = -1;
  std::vector<int> fds_;           // rank 0: one per rank (-1 for itself); others: [rank 0's]
  std::vector<int> peer_ranks_;    // the rank at the other end of fds_[i]
  std::atomic<bool> stop_{false};
  bool reported_ = false;
  std::mutex send_mutex_;
  std::thread thread_;
};

}  // namespace kerashvd
