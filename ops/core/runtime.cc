#include "runtime.h"

#include <mutex>

namespace kerashvd {
namespace {

std::mutex runtime_mutex;
std::shared_ptr<Engine> runtime_engine;

}  // namespace

Status InitRuntime(const Config& config) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (runtime_engine) return Status::Ok();
  std::unique_ptr<Engine> engine;
  KERASHVD_RETURN_IF_ERROR(Engine::Create(config, &engine));
  runtime_engine = std::move(engine);
  return Status::Ok();
}

void ShutdownRuntime() {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex);
    engine.swap(runtime_engine);
  }
  if (engine) engine->Shutdown();
}

std::shared_ptr<Engine> CurrentEngine() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  return runtime_engine;
}

Status RequireEngine(std::shared_ptr<Engine>* engine) {
  *engine = CurrentEngine();
  if (*engine) return Status::Ok();
  return Status::FailedPrecondition(
      "kerashvd has not been initialized: call kerashvd.init() before using collectives, "
      "rank() or size().");
}

}  // namespace kerashvd
