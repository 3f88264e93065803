// Runtime: the single place that owns the process's Engine. Both the Python module and the
// TensorFlow ops reach the engine through here; they link the same libkerashvd_core.so.
#pragma once

#include <memory>

#include "config.h"
#include "engine.h"

namespace kerashvd {

// Starts the engine. Calling it again while running is a no-op returning Ok.
Status InitRuntime(const Config& config);
// Stops and destroys the engine; a later InitRuntime starts a new one.
void ShutdownRuntime();
// The running engine, or null. Holding the shared_ptr keeps it alive across a shutdown().
std::shared_ptr<Engine> CurrentEngine();
// Ok when initialized, else a FailedPrecondition saying to call kerashvd.init() first.
Status RequireEngine(std::shared_ptr<Engine>* engine);

}  // namespace kerashvd
