// Runtime: the single place that owns the process's Engine. Both the Python module and the
// TensorFlow ops reach the engine through here; they link the same libkerashvd_core.so.
#pragma once

#include <memory>

#include "config.h"
#include "engine.h"

namespace kerashvd {

// Starts the engine. Calling it again while running is a no-op returning Ok; in a child forked
// after a successful call it fails (CheckNotForked).
Status InitRuntime(const Config& config);
// Stops and destroys the engine; a later InitRuntime starts a new one. In a forked child it
// only forgets the parent's engine (no MPI call, no thread to stop).
void ShutdownRuntime();
// The running engine, or null. Holding the shared_ptr keeps it alive across a shutdown().
std::shared_ptr<Engine> CurrentEngine();
// Ok when initialized, else a FailedPrecondition saying to call kerashvd.init() first. In a
// child process forked after InitRuntime, a FailedPrecondition saying that the child cannot
// use its parent's engine (see the fork protocol in runtime.cc). For everything that
// communicates: collectives, barrier, join, process sets.
Status RequireEngine(std::shared_ptr<Engine>* engine);
// The same for queries answered from this process's own state (rank, size, ...), which also
// answer in a forked child.
Status RequireEngineForQuery(std::shared_ptr<Engine>* engine);
// Ok, except in a child process forked after InitRuntime: then the FailedPrecondition above,
// saying that `what` cannot run there.
Status CheckNotForked(const char* what);

}  // namespace kerashvd
