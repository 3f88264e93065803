// Group: one of the engine's communicators, as everything outside backend/ sees it (c10d's
// Backend, Gloo's context: handed in, never built by the parts that use it). The backend's
// factory makes the world's group (CreateMpiWorld, backend/mpi/mpi_world.h); every other
// group comes from one: the process-set registry's own (Duplicate), each set's (Split) and a
// set's second one for its GPU collectives (Duplicate). A group produces what the engine runs
// over it: a lane's transport and a GPU plane. backend/mpi/mpi_group.h is the real one; the
// unit tests' FakeGroup (core/tests/fake_world.h) runs its ranks as threads.
//
// What a group produces uses the group: it must outlive the transport and the plane.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "status.h"
#include "topology.h"

namespace kerashvd {

struct LaneTransport;  // lane_transport.h
class GpuPlane;        // backend/gpu_plane.h
class Timeline;        // timeline.h

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where this rank sits in the group, nodes included (for the world: what the bindings report).
  virtual Topology topology() const = 0;
  // Collective: `all` gets every rank's `words` (the same count on every rank), in rank order.
  // Gives up with Aborted, naming `what`, after the peer timeout or when the engine aborts;
  // the exchange may then still be in flight, so the group must not be used again.
  virtual Status Allgather(const std::vector<uint64_t>& words, const char* what,
                           std::vector<uint64_t>* all) = 0;
  // Collective: the ranks passing the same `color` (>= 0) get a group of their own, ranked in
  // this group's order; a rank passing -1 gets null. Call it only when every rank is known to
  // call it (after an agreement): it has no timeout.
  virtual Status Split(int color, std::unique_ptr<Group>* out) = 0;
  // Collective, like Split: a group of the same ranks whose traffic never meets this one's.
  virtual Status Duplicate(std::unique_ptr<Group>* out) = 0;
  // Local: the control plane and host backend of a lane over this group. `label` prefixes a
  // warning about the group's node layout ("" for the world, "process set <id>: "), logged
  // by the group's rank 0 as world rank `world_rank0`.
  virtual LaneTransport MakeLaneTransport(const Config& config, const std::string& label,
                                          int world_rank0) = 0;
  // Collective over the group, in the same order on every rank: a GPU plane on `device` over
  // this group (backend/gpu_plane.h); Unimplemented where the build has no GPU backend.
  // `timeout_seconds` bounds each wait for a GPU collective (0: unbounded).
  virtual Status CreateGpuPlane(Timeline* timeline, int device, double timeout_seconds,
                                std::unique_ptr<GpuPlane>* out) = 0;
  // A peer failed: the library under the group cannot be used again in this process (no
  // teardown that would wait for the dead rank, no new engine).
  virtual void MarkBroken() = 0;
};

}  // namespace kerashvd
