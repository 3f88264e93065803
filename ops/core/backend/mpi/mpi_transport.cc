#include "mpi_transport.h"

#include "../../logging.h"
#include "../../peer_monitor.h"
#include "mpi_backend.h"
#include "mpi_control_plane.h"

namespace kerashvd {

LaneTransport MakeMpiTransport(const MpiContext* comm, const Config& config,
                               const AbortFlag* abort, const std::string& label,
                               int world_rank0) {
  LaneTransport transport;
  transport.huge_pages = std::make_unique<HugePages>(config.huge_pages);
  transport.control = std::make_unique<MpiControlPlane>(
      comm, BackstopTimeout(config.peer_timeout_seconds), abort);
  HierarchyPlan hierarchy = PlanHierarchy(config, *comm);
  if (!hierarchy.note.empty()) {
    int world_rank = world_rank0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    LogWarning(world_rank, label + hierarchy.note);
  }
  transport.backend = std::make_unique<MpiBackend>(
      comm, abort, transport.huge_pages.get(), std::move(hierarchy),
      MakeShmPair(comm, abort, config.shm_allreduce));
  return transport;
}

}  // namespace kerashvd
