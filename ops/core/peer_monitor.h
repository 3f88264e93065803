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
// Rank 0 is watched like any other rank: every other rank hears rank 0's heartbeats on its
// own connection, so a frozen rank 0 is named by each of them after the peer timeout, and a
// dead one at once. Waits that time out by themselves (negotiation, process-set registration)
// must not end with an error that names nobody while the monitor is about to name a frozen
// rank: they use BackstopTimeout, and do not time out while a watched peer has been silent for
// more than kSuspectSeconds (AbortFlag::suspicion), which covers a wait that began long before
// the freeze.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "abort_flag.h"
#include "control_plane.h"
#include "status.h"

namespace kerashvd {

// Every rank sends a heartbeat this often.
constexpr double kHeartbeatSeconds = 1.0;
// A watched peer silent this long is suspected of being frozen (see the file comment).
constexpr double kSuspectSeconds = 1.5 * kHeartbeatSeconds;

// The timeout of a wait that has its own (a negotiation, a process-set registration): longer
// than the peer timeout by two heartbeats, so that when a rank froze or died while others
// waited, the monitor has named it before the wait gives up with an error that cannot name
// anyone. It still ends a wait on a rank that is alive but stuck outside kerashvd.
inline double BackstopTimeout(double peer_timeout_seconds) {
  return peer_timeout_seconds + 2 * kHeartbeatSeconds;
}

class PeerMonitor {
 public:
  using FailureCallback = std::function<void(int failed_rank, const std::string& what)>;

  // `abort` (outlives the monitor) receives the suspicion of a silent peer (abort_flag.h).
  PeerMonitor(ControlPlane* control, double peer_timeout_seconds, bool single_host,
              AbortFlag* abort, FailureCallback on_failure);
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
  AbortFlag* abort_;
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
