// Group: a communicator as the engine's generic parts see it (the process-set registry),
// without naming MPI. backend/mpi/mpi_group.h is the real one; the unit tests' FakeGroup
// (core/tests/fake_world.h) runs its ranks as threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "status.h"

namespace kerashvd {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: `all` gets every rank's `words` (the same count on every rank), in rank order.
  // Gives up with Aborted, naming `what`, after the peer timeout or when the engine aborts;
  // the exchange may then still be in flight, so the group must not be used again.
  virtual Status Allgather(const std::vector<uint64_t>& words, const char* what,
                           std::vector<uint64_t>* all) = 0;
  // Collective: the ranks passing the same `color` (>= 0) get a group of their own, ranked in
  // this group's order; a rank passing -1 gets null. Call it only when every rank is known to
  // call it (after an agreement): it has no timeout.
  virtual Status Split(int color, std::unique_ptr<Group>* out) = 0;
};

}  // namespace kerashvd
