// Topology: where this process sits among the ranks, as the bindings report it (rank, size,
// local and cross ranks). A plain value, filled once when the engine is created, so that the
// Python and TensorFlow bindings need not know which backend found it out.
#pragma once

namespace kerashvd {

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;   // among the ranks on this node
  int local_size = 1;
  int cross_rank = 0;   // among the ranks with this local rank, one per node
  int cross_size = 1;
  bool homogeneous = true;        // every node runs the same number of ranks
  bool threads_supported = false; // the backend lets user threads communicate beside ours
};

}  // namespace kerashvd
