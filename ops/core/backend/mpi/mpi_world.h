// CreateMpiWorld: the engine's one way into MPI. It initializes MPI (mpi_context.h) and
// returns the world as a Group (../../group.h), from which the engine makes everything else
// it runs over MPI, without naming it.
#pragma once

#include <memory>

#include "../../abort_flag.h"
#include "../../config.h"
#include "../../group.h"

namespace kerashvd {

// `abort` (the engine's, outliving the group and every group made from it) ends any wait of
// theirs when a peer fails; waits with a timeout of their own give up after the peer timeout
// plus two heartbeats (BackstopTimeout, peer_monitor.h).
Status CreateMpiWorld(const Config& config, const AbortFlag* abort, std::unique_ptr<Group>* out);

}  // namespace kerashvd
