// Config: every engine setting, read once by Python at init() from KERASHVD_* variables and
// keyword arguments, validated there, and handed to the engine. The engine never calls getenv.
// The initializers below are the defaults; settings.h says how users set each field.
#pragma once

#include <cstdint>
#include <string>

namespace kerashvd {

// Whether allreduce and allgather on host memory go node by node (mpi_hierarchical.h): kOn
// wherever there are several nodes, kOff never, kAuto where it pays (allreduce: LinkModel,
// link_model.h; allgather: where a node runs several ranks). Numbering is part of the Python
// binding.
enum class Hierarchical : int { kAuto = 0, kOff = 1, kOn = 2 };

struct Config {
  // Tensors ready in the same cycle are packed into one buffer up to this many bytes.
  int64_t fusion_threshold_bytes = 128LL * 1024 * 1024;
  // Time the background thread sleeps between negotiation cycles while nothing is pending on
  // this rank (engine.h). A submitted tensor wakes it at once, so this never delays a
  // collective; it bounds how soon stalls and a peer's shutdown are noticed.
  double cycle_time_ms = 50.0;
  // After a cycle that ran collectives, the background thread keeps polling its queue this
  // long (yielding the core between polls) before it sleeps (lane.h "Lingering"); 0: never.
  double linger_ms = 0.0;
  // A single allreduce of host memory up to this many bytes (at most kCarryMaxBytes) that the
  // ranks predict will come next rides in the negotiation's allreduce (carry.h); 0: never.
  int64_t carry_bytes = 16 * 1024;
  // Number of distinct tensor signatures remembered by the response cache; 0 disables it.
  int64_t cache_capacity = 1024;
  // A collective submitted by some ranks but not all for this long is reported (0: never).
  double stall_check_seconds = 60.0;
  // ...and after this long stops the engine on every rank, failing that collective and every
  // later one with a message naming it and the missing ranks (0: never). Ten minutes: longer
  // than the waits of healthy training (a first step's tracing, rank 0 writing a checkpoint or
  // evaluating alone while the others wait), short enough that a stall does not hold the
  // job's machines for hours.
  double stall_shutdown_seconds = 600.0;
  // A negotiation that does not complete within this long means a rank stopped answering
  // (died, or its process is stuck outside kerashvd); the engine then fails on this rank.
  double peer_timeout_seconds = 30.0;
  // Advise large host buffers of collectives to use transparent huge pages (huge_pages.h).
  bool huge_pages = true;
  // Allreduce between the two ranks of a communicator on one host through the engine's own
  // shared memory (backend/shm/shm_pair.h) instead of MPI.
  bool shm_allreduce = true;
  Hierarchical hierarchical_allreduce = Hierarchical::kAuto;
  Hierarchical hierarchical_allgather = Hierarchical::kAuto;
  // Tune fusion_threshold_bytes and cycle_time_ms online during the first steps, then freeze
  // them (autotune.h). The log of its trials goes to autotune_log_path ("" = none).
  bool autotune = false;
  std::string autotune_log_path;
  // Samples discarded at the start of each trial, and cycles with work in one sample.
  int64_t autotune_warmup_samples = 1;
  int64_t autotune_steps_per_sample = 5;
  // Write a Chrome-trace timeline here from init() on ("" = none); see timeline.h.
  std::string timeline_path;
  int64_t timeline_max_bytes = 256LL * 1024 * 1024;
};

}  // namespace kerashvd
