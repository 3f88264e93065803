#include "mpi_wait.h"

#include <sstream>
#include <thread>

#include "mpi_context.h"

namespace kerashvd {

Status MpiWait(MPI_Request* request, const char* what, const AbortFlag* abort,
               const WaitPolicy& policy, int rank) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto spin_from = start;
  auto nap = std::chrono::microseconds(10);
  for (uint64_t polls = 0;; ++polls) {
    int flag = 0;
    int rc = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, what);
    if (flag) return Status::Ok();
    if (abort && (polls & 63) == 0 && abort->is_set()) return abort->status();
    if (policy.spin.count() < 0) continue;
    const auto now = Clock::now();
    if (now - spin_from < policy.spin) continue;
    if (policy.timeout_seconds > 0 &&
        now - start > std::chrono::duration<double>(policy.timeout_seconds)) {
      std::ostringstream msg;
      msg << "kerashvd rank " << rank << ": no answer from the other ranks for "
          << policy.timeout_seconds << " s during " << what
          << ". A rank has died or its process is stuck (killed, out of memory, stopped in a "
             "debugger). Check the other ranks' output; the peer timeout is set with "
             "KERASHVD_PEER_TIMEOUT (seconds).";
      return Status::Aborted(msg.str());
    }
    bool woken = policy.idler && *policy.idler ? (*policy.idler)(nap) : (std::this_thread::sleep_for(nap), false);
    if (woken) {
      spin_from = Clock::now();
      nap = std::chrono::microseconds(10);
    } else {
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace kerashvd
