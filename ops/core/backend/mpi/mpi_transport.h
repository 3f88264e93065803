// MakeMpiTransport: a lane's MPI control plane and host backend over one communicator.
#pragma once

#include <string>

#include "../../abort_flag.h"
#include "../../config.h"
#include "../../lane_transport.h"
#include "mpi_context.h"

namespace kerashvd {

// `comm` outlives the transport. `label` prefixes the log line of a hierarchy that cannot be
// used ("" for the world, "process set <id>: " otherwise), written by the rank that is rank 0
// of `comm`, as world rank `world_rank0`.
LaneTransport MakeMpiTransport(const MpiContext* comm, const Config& config,
                               const AbortFlag* abort, const std::string& label,
                               int world_rank0);

}  // namespace kerashvd
