// MakeMpiTransport: a lane's MPI control plane and host backend over one communicator.
#pragma once

#include <string>

#include "../../abort_flag.h"
#include "../../config.h"
#include "../../lane_transport.h"
#include "mpi_context.h"

namespace kerashvd {

// `comm` outlives the transport. Collective over `comm` (the hierarchy's plan). `label`
// prefixes the log line of a rank whose hierarchical settings differ from rank 0's ("" for the
// world, "process set <id>: " otherwise); `world_rank0`: the world rank of `comm`'s rank 0.
LaneTransport MakeMpiTransport(const MpiContext* comm, const Config& config,
                               const AbortFlag* abort, const std::string& label,
                               int world_rank0);

}  // namespace kerashvd
