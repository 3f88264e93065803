// LaneTransport: what a lane communicates through, made by the group that the lane runs over
// (Group::MakeLaneTransport, group.h) and handed to the lane, which never names the library
// underneath.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "control_plane.h"
#include "huge_pages.h"

namespace kerashvd {

struct LaneTransport {
  // Advice for the large host buffers the backend streams through (may be null); it lives as
  // long as the backend, which uses it.
  std::unique_ptr<HugePages> huge_pages;
  std::unique_ptr<ControlPlane> control;  // the negotiation's collectives
  std::unique_ptr<Backend> backend;       // the data plane for host memory
};

}  // namespace kerashvd
