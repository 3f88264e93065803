#include "runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

#include "backend/mpi/mpi_world.h"  // the backend this runtime builds the engine on

namespace kerashvd {
namespace {

std::mutex runtime_mutex;
std::shared_ptr<Engine> runtime_engine;

// Fork protocol. fork() copies the engine object into the child, but not the threads that
// drive it (the lanes' background threads, the peer monitor), and the child has no place in
// the parent's MPI communicator: a collective submitted there would be queued for a thread
// that does not exist and wait forever. So the first successful InitRuntime registers a
// pthread_atfork child handler that only sets `forked_child` (async-signal-safe, as a handler
// run by fork() must be). From then on, in any child forked from this process:
// - RequireEngine (every collective, barrier, join, process-set and timeline call) and
//   InitRuntime fail at once with FailedPrecondition naming both pids and the fix;
// - queries answered from the inherited state (RequireEngineForQuery: rank, size, ...) still
//   work, so a data-loading worker may read its parent's rank;
// - ShutdownRuntime forgets the copy without running its destructor, which would join the
//   missing threads and call into MPI.
// The check is one relaxed atomic load per collective.
std::atomic<bool> forked_child{false};
pid_t initializing_pid = 0;  // the process whose InitRuntime succeeded first
std::once_flag atfork_once;

void MarkForkedChild() { forked_child.store(true, std::memory_order_relaxed); }

Status ForkedChildError(const char* what) {
  return Status::FailedPrecondition(
      std::string("kerashvd cannot run ") + what + " in process " + std::to_string(getpid()) +
      ": it is a fork of process " + std::to_string(initializing_pid) +
      ", the rank that initialized kerashvd (os.fork(), or a multiprocessing worker started with "
      "the 'fork' method, after kerashvd.init()). A forked child cannot use its parent's "
      "communicator or background thread, so a collective here would wait forever. Run "
      "collectives in the parent process; start worker processes with the 'spawn' start method "
      "(multiprocessing.get_context('spawn')), or, for more ranks, start them with kerashvdrun "
      "-np N. rank(), size() and the other topology queries still answer for the parent's rank.");
}

}  // namespace

Status CheckNotForked(const char* what) {
  if (forked_child.load(std::memory_order_relaxed)) return ForkedChildError(what);
  return Status::Ok();
}

Status InitRuntime(const Config& config) {
  KERASHVD_RETURN_IF_ERROR(CheckNotForked("init()"));
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (runtime_engine) return Status::Ok();
  std::unique_ptr<Engine> engine;
  KERASHVD_RETURN_IF_ERROR(Engine::Create(config, CreateMpiWorld, &engine));
  runtime_engine = std::move(engine);
  std::call_once(atfork_once, [] {
    initializing_pid = getpid();
    pthread_atfork(nullptr, nullptr, MarkForkedChild);
  });
  return Status::Ok();
}

void ShutdownRuntime() {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex);
    engine.swap(runtime_engine);
  }
  if (!engine) return;
  if (forked_child.load(std::memory_order_relaxed)) {
    new std::shared_ptr<Engine>(std::move(engine));  // deliberately leaked: see the fork protocol
    return;
  }
  engine->Shutdown();
}

std::shared_ptr<Engine> CurrentEngine() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  return runtime_engine;
}

Status RequireEngineForQuery(std::shared_ptr<Engine>* engine) {
  *engine = CurrentEngine();
  if (*engine) return Status::Ok();
  return Status::FailedPrecondition(
      "kerashvd has not been initialized: call kerashvd.init() before using collectives, "
      "rank() or size().");
}

Status RequireEngine(std::shared_ptr<Engine>* engine) {
  KERASHVD_RETURN_IF_ERROR(CheckNotForked("collectives"));
  return RequireEngineForQuery(engine);
}

}  // namespace kerashvd
