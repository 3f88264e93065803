#include "mpi_world.h"

#include "../../peer_monitor.h"
#include "mpi_group.h"

namespace kerashvd {

Status CreateMpiWorld(const Config& config, const AbortFlag* abort, std::unique_ptr<Group>* out) {
  std::unique_ptr<MpiContext> world;
  KERASHVD_RETURN_IF_ERROR(MpiContext::Create(&world));
  *out = std::make_unique<MpiGroup>(std::move(world), BackstopTimeout(config.peer_timeout_seconds),
                                    abort);
  return Status::Ok();
}

}  // namespace kerashvd
