// kerashvd_gpu_engine_bench: float32 allreduce of GPU buffers through the engine
// (Engine::Submit, negotiation, the GPU plane) against raw ncclAllReduce of the same bytes on
// a communicator of its own, measured in the same run. An nccl-tests-style table: size,
// time per call (each call waited for, as a framework op is), algbw, busbw with nccl-tests'
// factor 2(n-1)/n, #wrong (elements of the engine's last result that differ from the exact
// sum), and the engine's busbw over raw NCCL's.
//
//   mpiexec -n 2 ./kerashvd_gpu_engine_bench [seconds per size, default 0.5]
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "../../engine.h"
#include "../mpi/mpi_world.h"
#include "nccl_context.h"
#include "nccl_test_harness.h"

namespace kerashvd {
namespace {

using Clock = std::chrono::steady_clock;
using nccl_test::CheckCuda;
using nccl_test::Fatal;

void CheckNccl(ncclResult_t result, const char* call) {
  Status status = NcclStatus(result, call);
  if (!status.ok()) Fatal(status.message());
}

// Runs `call` until `seconds` have passed (at least 5 times, after 3 warm-ups); the same
// number of times on every rank (rank 0 decides). Returns seconds per call.
template <typename Call>
double TimePerCall(MPI_Comm comm, double seconds, Call call) {
  for (int i = 0; i < 3; ++i) call();
  int iterations = 0;
  const auto start = Clock::now();
  for (;;) {
    call();
    ++iterations;
    int more = iterations < 5 ||
               std::chrono::duration<double>(Clock::now() - start).count() < seconds;
    MPI_Bcast(&more, 1, MPI_INT, 0, comm);
    if (!more) break;
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / iterations;
}

// One engine allreduce, waited for.
Status EngineAllreduce(Engine* engine, const std::string& name, void* in, void* out,
                       int64_t count, int device) {
  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  Status result;
  TensorEntry entry;
  entry.request.name = name;
  entry.request.op_type = OpType::kAllreduce;
  entry.request.reduce_op = ReduceOp::kSum;
  entry.request.dtype = DataType::kFloat32;
  entry.request.device = device;
  entry.request.shapes = {{count}};
  entry.inputs = {in};
  entry.outputs = {out};
  entry.done = [&](const Status& s, const CollectiveResult&) {
    std::lock_guard<std::mutex> lock(mutex);
    result = s;
    finished = true;
    cv.notify_all();
  };
  KERASHVD_RETURN_IF_ERROR(engine->Submit(std::move(entry)));
  std::unique_lock<std::mutex> lock(mutex);
  cv.wait(lock, [&] { return finished; });
  return result;
}

}  // namespace
}  // namespace kerashvd

int main(int argc, char** argv) {
  using namespace kerashvd;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  std::unique_ptr<Engine> engine;
  Status status = Engine::Create(Config(), CreateMpiWorld, &engine);
  if (!status.ok()) Fatal("Engine::Create failed: " + status.message());
  const int rank = engine->topology().rank, size = engine->topology().size;
  int devices = 0;
  CheckCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int device = engine->topology().local_rank % devices;
  CheckCuda(cudaSetDevice(device), "cudaSetDevice");

  // The baseline's own communicator, beside the engine's (MPI is initialized multi-threaded).
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  ncclUniqueId id;
  if (rank == 0) CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
  ncclComm_t raw;
  CheckNccl(ncclCommInitRank(&raw, size, id, rank), "ncclCommInitRank");
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  const double factor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  if (rank == 0) {
    std::printf("# kerashvd_gpu_engine_bench: %d ranks, float32 sum, %.2f s per size\n", size,
                seconds);
    std::printf("%12s %12s %11s %10s %11s %10s %7s %8s\n", "size(B)", "count", "raw(us)",
                "raw busbw", "engine(us)", "busbw", "#wrong", "ratio");
  }
  const int64_t max_count = (64LL << 20) / 4;
  const std::vector<float> ones(max_count, 1.0f);
  void *in, *out;
  CheckCuda(cudaMalloc(&in, max_count * 4), "cudaMalloc");
  CheckCuda(cudaMalloc(&out, max_count * 4), "cudaMalloc");
  CheckCuda(cudaMemcpy(in, ones.data(), max_count * 4, cudaMemcpyHostToDevice), "upload");
  for (int64_t bytes = 4096; bytes <= (64LL << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    const double raw_s = TimePerCall(comm, seconds, [&] {
      CheckNccl(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, raw, stream), "ncclAllReduce");
      CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    // Stale results of the baseline must not count for the engine.
    CheckCuda(cudaMemset(out, 0, bytes), "cudaMemset");
    CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    // One name per size, as a training step reuses its op names: the response cache applies.
    const std::string name = "bench." + std::to_string(bytes);
    const double engine_s = TimePerCall(comm, seconds, [&] {
      Status s = EngineAllreduce(engine.get(), name, in, out, count, device);
      if (!s.ok()) Fatal(s.message());
    });
    std::vector<float> result(count);
    CheckCuda(cudaMemcpy(result.data(), out, bytes, cudaMemcpyDeviceToHost), "download");
    int64_t wrong = 0;
    for (float v : result) wrong += v != static_cast<float>(size);
    if (rank == 0) {
      const double raw_bw = bytes / raw_s / 1e9 * factor, bw = bytes / engine_s / 1e9 * factor;
      std::printf("%12lld %12lld %11.1f %10.2f %11.1f %10.2f %7lld %8.2f\n",
                  static_cast<long long>(bytes), static_cast<long long>(count), raw_s * 1e6,
                  raw_bw, engine_s * 1e6, bw, static_cast<long long>(wrong), bw / raw_bw);
      std::fflush(stdout);
    }
  }
  cudaFree(in);
  cudaFree(out);
  ncclCommDestroy(raw);
  cudaStreamDestroy(stream);
  MPI_Comm_free(&comm);
  engine->Shutdown();
  return 0;
}
