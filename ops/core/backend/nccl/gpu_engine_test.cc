// kerashvd_gpu_engine_test: the whole engine (negotiation, fusion, the GPU plane, NCCL) on GPU
// tensors, through Engine::Submit as the TensorFlow kernels use it. No TensorFlow, no Python.
//
//   mpiexec -n 2 ./kerashvd_gpu_engine_test
//
// Every rank submits the same collectives in the same order, waits for each step's callbacks
// and checks its own outputs against a reference it computes locally. Covered: allreduce in
// every reducible dtype (single tensors take the executor's direct path, grouped ones the
// fusion buffer; float16/bfloat16 are widened on the GPU), prescale/postscale and Average,
// many tensors submitted together (fused by the engine), allgather with a first dimension
// that differs per rank, broadcast from every root, alltoall with uneven splits, uneven
// reducescatter, a CPU and a GPU tensor in one cycle, a join (the joined rank contributes
// zeros from GPU scratch memory, or the identity of Max, Min and Product, and a broadcast is
// refused while it has joined), a shape mismatch (an error on every rank, then the engine
// goes on), a tensor on the wrong GPU (refused at submission), wait_inputs being called, and
// collectives of overlapping process sets submitted in a different order on each rank.
// Rank 0 prints every rank's failures and "N passed, N failed" as its last line.
//
//   mpiexec -n 2 ./kerashvd_gpu_engine_test --freeze
//
// instead checks a failure: ranks loop on a 64 MiB GPU allreduce and rank 1 stops itself
// (SIGSTOP) after two seconds, most likely inside an NCCL collective. Every other rank must
// get an error naming rank 1 within the peer timeout (5 s) plus a margin, print "FREEZE OK",
// and then end the job with MPI_Abort (which also kills the stopped rank).
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../mpi/mpi_world.h"
#include "gpu_engine_jobs.h"

namespace kerashvd {
namespace {

using namespace gpu_engine_test;

// --- Cases ----------------------------------------------------------------------------------

void TestAllreduce(Engine* e, Tally* t, int rank, int size) {
  const std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                        DataType::kInt64,   DataType::kUint8,   DataType::kInt8,
                                        DataType::kFloat16, DataType::kBfloat16};
  for (DataType dtype : dtypes)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax})
      for (int64_t n : {0, 1, 7, 1 << 20}) {
        if (op == ReduceOp::kAverage && !IsFloating(dtype)) continue;
        // Grouped: two tensors reduced as one unit go through the fusion buffer.
        for (bool grouped : {false, true}) {
          const std::string name = std::string("allreduce.") + DataTypeName(dtype) + "." +
                                   ReduceOpName(op) + "." + std::to_string(n) +
                                   (grouped ? ".grouped" : "");
          std::vector<Shape> shapes = {{n}};
          if (grouped) shapes.push_back({3});
          Job job;
          job.entry.request = MakeRequest(name, OpType::kAllreduce, dtype, shapes);
          job.entry.request.reduce_op = op;
          // Floats get scale factors, integers stay unscaled so results are exact.
          const bool scaled = IsFloating(dtype);
          if (scaled) {
            job.entry.request.prescale = 0.5;
            job.entry.request.postscale = 4.0;
          }
          AddTensor(&job, Values(rank, n), n);
          if (grouped) AddTensor(&job, Values(rank, 3, 5), 3);
          RunAll(e, {&job});
          for (size_t k = 0; k < shapes.size(); ++k) {
            const int64_t m = shapes[k][0];
            std::vector<double> expected(m);
            for (int64_t i = 0; i < m; ++i) {
              const int64_t at = i + (k == 0 ? 0 : 5);
              double acc = op == ReduceOp::kMax ? -1e300 : 0;
              for (int r = 0; r < size; ++r) {
                const double x = Value(r, at) * (scaled ? 0.5 : 1.0);
                acc = op == ReduceOp::kMax ? std::max(acc, x) : acc + x;
              }
              if (op == ReduceOp::kAverage) acc /= size;
              expected[i] = acc * (scaled ? 4.0 : 1.0);
            }
            Check(t, name + "[" + std::to_string(k) + "]", job, expected, k);
          }
        }
      }
}

void TestManyAtOnce(Engine* e, Tally* t, int rank, int size) {
  // Forty tensors submitted before the engine looks: negotiated together and fused.
  std::vector<Job> jobs(40);
  std::vector<Job*> all;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int64_t n = 1000 + 37 * j;
    jobs[j].entry.request = MakeRequest("many." + std::to_string(j), OpType::kAllreduce,
                                        DataType::kFloat32, {{n}});
    jobs[j].entry.request.reduce_op = ReduceOp::kAverage;
    AddTensor(&jobs[j], Values(rank, n, j), n);
    all.push_back(&jobs[j]);
  }
  RunAll(e, all);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int64_t n = 1000 + 37 * j;
    std::vector<double> expected(n, 0);
    for (int64_t i = 0; i < n; ++i) {
      for (int r = 0; r < size; ++r) expected[i] += Value(r, i + j);
      expected[i] /= size;
    }
    Check(t, jobs[j].entry.request.name, jobs[j], expected);
  }
}

void TestAllgather(Engine* e, Tally* t, int rank, int size) {
  for (DataType dtype : {DataType::kFloat32, DataType::kUint8, DataType::kFloat16}) {
    const int64_t cols = 5;
    Job job;
    const int64_t rows = rank + 1;  // differs per rank
    job.entry.request = MakeRequest(std::string("allgather.") + DataTypeName(dtype),
                                    OpType::kAllgather, dtype, {{rows, cols}});
    AddTensor(&job, Values(rank, rows * cols), 0, /*allocate_later=*/true);
    RunAll(e, {&job});
    std::vector<double> expected;
    for (int r = 0; r < size; ++r)
      for (double v : Values(r, (r + 1) * cols)) expected.push_back(v);
    Check(t, job.entry.request.name, job, expected);
  }
}

void TestBroadcast(Engine* e, Tally* t, int rank, int size) {
  for (int root = 0; root < size; ++root) {
    Job job;
    job.entry.request = MakeRequest("broadcast.from" + std::to_string(root), OpType::kBroadcast,
                                    DataType::kFloat64, {{1001}});
    job.entry.request.root_rank = root;
    AddTensor(&job, Values(rank, 1001), 1001);
    RunAll(e, {&job});
    Check(t, job.entry.request.name, job, Values(root, 1001));
  }
}

void TestAlltoall(Engine* e, Tally* t, int rank, int size) {
  // Rank r sends (r + d) % 3 rows of 2 columns to rank d; rows hold the sender and target.
  const int64_t cols = 2;
  auto rows_to = [](int from, int to) { return static_cast<int64_t>((from + to) % 3); };
  std::vector<double> values;
  std::vector<int64_t> splits;
  for (int d = 0; d < size; ++d) {
    splits.push_back(rows_to(rank, d));
    for (int64_t i = 0; i < rows_to(rank, d) * cols; ++i) values.push_back(rank * 100 + d * 10 + i);
  }
  Job job;
  job.entry.request = MakeRequest("alltoall", OpType::kAlltoall, DataType::kInt32,
                                  {{static_cast<int64_t>(values.size()) / cols, cols}});
  job.entry.splits = splits;
  AddTensor(&job, values, 0, /*allocate_later=*/true);
  RunAll(e, {&job});
  std::vector<double> expected;
  std::vector<int64_t> expected_splits;
  for (int s = 0; s < size; ++s) {
    expected_splits.push_back(rows_to(s, rank));
    for (int64_t i = 0; i < rows_to(s, rank) * cols; ++i) expected.push_back(s * 100 + rank * 10 + i);
  }
  Check(t, "alltoall", job, expected);
  t->Record("alltoall.received_splits", job.status,
            job.result.received_splits == expected_splits ? "" : "wrong received splits");
}

void TestReducescatter(Engine* e, Tally* t, int rank, int size) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16}) {
    const int64_t rows = 7, cols = 3;  // 7 rows do not divide by 2, 3 or 4 ranks
    Job job;
    job.entry.request = MakeRequest(std::string("reducescatter.") + DataTypeName(dtype),
                                    OpType::kReducescatter, dtype, {{rows, cols}});
    job.entry.request.reduce_op = ReduceOp::kAverage;
    const int64_t mine = rows / size + (rank < rows % size ? 1 : 0);
    int64_t first = 0;
    for (int r = 0; r < rank; ++r) first += rows / size + (r < rows % size ? 1 : 0);
    AddTensor(&job, Values(rank, rows * cols), mine * cols);
    RunAll(e, {&job});
    std::vector<double> expected(mine * cols, 0);
    for (int64_t i = 0; i < mine * cols; ++i) {
      for (int r = 0; r < size; ++r) expected[i] += Value(r, first * cols + i);
      expected[i] /= size;
    }
    Check(t, job.entry.request.name, job, expected);
  }
}

void TestMixedDevices(Engine* e, Tally* t, int rank, int size) {
  // A host tensor and a GPU tensor in the same cycle: each goes to its own executor.
  std::vector<float> host_in(100), host_out(100, -1);
  for (int i = 0; i < 100; ++i) host_in[i] = static_cast<float>(Value(rank, i));
  Job cpu;
  cpu.entry.request = MakeRequest("mixed.cpu", OpType::kAllreduce, DataType::kFloat32, {{100}}, -1);
  cpu.entry.inputs = {host_in.data()};
  cpu.entry.outputs = {host_out.data()};
  Job gpu;
  gpu.entry.request = MakeRequest("mixed.gpu", OpType::kAllreduce, DataType::kFloat32, {{100}});
  AddTensor(&gpu, Values(rank, 100), 100);
  RunAll(e, {&cpu, &gpu});
  std::vector<double> expected(100, 0);
  for (int i = 0; i < 100; ++i)
    for (int r = 0; r < size; ++r) expected[i] += Value(r, i);
  Check(t, "mixed.gpu", gpu, expected);
  std::vector<double> got(host_out.begin(), host_out.end());
  t->Record("mixed.cpu", cpu.status, cpu.status.ok() ? Compare(DataType::kFloat32, expected, got) : "");
}

// The last rank to join is one of those that reduced first (any, for more than two ranks).
void CheckLastJoined(Tally* t, const Job& join, int size) {
  const int last = join.result.last_joined_rank;
  const bool ok = size == 1 ? last == 0 : (last >= 0 && last < size - 1);
  t->Record("join.last_joined", join.status,
            ok ? "" : "last joined rank " + std::to_string(last) + " did not join last");
}

// Run by every rank but the last, which has joined: Max, Min and Product get the op's identity
// from it, not zeros (Max of negative values and Min and Product of positive ones, where a
// zero would change the result), alone (the direct path) and as a pair (the fusion buffer);
// a broadcast is refused with an error naming the joined rank.
void TestJoinedIdentity(Engine* e, Tally* t, int rank, int size) {
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
    const double sign = op == ReduceOp::kMax ? -1 : 1;
    auto values = [&](int r, int64_t n, int64_t offset) {
      std::vector<double> v = Values(r, n, offset);
      for (double& x : v) x *= sign;
      return v;
    };
    auto expected = [&](int64_t n, int64_t offset) {
      std::vector<double> out = values(0, n, offset);
      for (int r = 1; r < size - 1; ++r) {
        std::vector<double> v = values(r, n, offset);
        for (int64_t i = 0; i < n; ++i)
          out[i] = op == ReduceOp::kMax ? std::max(out[i], v[i])
                   : op == ReduceOp::kMin ? std::min(out[i], v[i]) : out[i] * v[i];
      }
      return out;
    };
    const std::string name = std::string("joined.") + ReduceOpName(op);
    Job lone, pair;
    lone.entry.request = MakeRequest(name, OpType::kAllreduce, DataType::kFloat32, {{33}});
    lone.entry.request.reduce_op = op;
    AddTensor(&lone, values(rank, 33, 0), 33);
    pair.entry.request = MakeRequest(name + ".pair", OpType::kAllreduce, DataType::kFloat32, {{5}, {7}});
    pair.entry.request.reduce_op = op;
    AddTensor(&pair, values(rank, 5, 0), 5);
    AddTensor(&pair, values(rank, 7, 5), 7);
    RunAll(e, {&lone});  // alone in its cycle, so not fused with the pair
    RunAll(e, {&pair});
    Check(t, name, lone, expected(33, 0));
    Check(t, name + ".pair[0]", pair, expected(5, 0), 0);
    Check(t, name + ".pair[1]", pair, expected(7, 5), 1);
  }
  Job bcast;
  bcast.entry.request = MakeRequest("joined.broadcast", OpType::kBroadcast, DataType::kFloat32, {{4}});
  AddTensor(&bcast, Values(rank, 4), 4);
  RunAll(e, {&bcast});
  t->ExpectError("joined.broadcast", bcast.status, Status::Code::kMismatch,
                 "rank " + std::to_string(size - 1) + " has joined");
}

void TestJoin(Engine* e, Tally* t, int rank, int size) {
  // The last rank joins; the others reduce a GPU tensor, to which it contributes zeros.
  Job work, join;
  if (rank == size - 1) {
    join.entry.request = MakeRequest("join", OpType::kJoin, DataType::kInt32, {}, -1);
    RunAll(e, {&join});
    CheckLastJoined(t, join, size);
    return;
  }
  work.entry.request = MakeRequest("joined.allreduce", OpType::kAllreduce, DataType::kFloat32, {{64}});
  AddTensor(&work, Values(rank, 64), 64);
  RunAll(e, {&work});
  std::vector<double> expected(64, 0);
  for (int i = 0; i < 64; ++i)
    for (int r = 0; r < size - 1; ++r) expected[i] += Value(r, i);
  Check(t, "joined.allreduce", work, expected);
  TestJoinedIdentity(e, t, rank, size);
  join.entry.request = MakeRequest("join", OpType::kJoin, DataType::kInt32, {}, -1);
  RunAll(e, {&join});
  CheckLastJoined(t, join, size);
}

void TestErrors(Engine* e, Tally* t, int rank, int size) {
  // A shape that differs on rank 1: every rank gets a Mismatch naming the tensor.
  Job bad;
  const int64_t n = size > 1 && rank == 1 ? 5 : 4;
  bad.entry.request = MakeRequest("mismatched", OpType::kAllreduce, DataType::kFloat32, {{n}});
  AddTensor(&bad, Values(rank, n), n);
  RunAll(e, {&bad});
  if (size > 1) {
    t->ExpectError("mismatch.error", bad.status, Status::Code::kMismatch, "mismatched");
  }
  // The engine goes on, and wait_inputs is called before the inputs are read.
  Job after;
  bool waited = false;
  after.entry.request = MakeRequest("after.error", OpType::kAllreduce, DataType::kFloat32, {{9}});
  after.entry.wait_inputs = [&waited] {
    waited = true;
    return Status::Ok();
  };
  AddTensor(&after, Values(rank, 9), 9);
  RunAll(e, {&after});
  std::vector<double> expected(9, 0);
  for (int i = 0; i < 9; ++i)
    for (int r = 0; r < size; ++r) expected[i] += Value(r, i);
  Check(t, "after.error", after, expected);
  t->Record("wait_inputs.called", Status::Ok(), waited ? "" : "wait_inputs was not called");
  // A tensor on another GPU than this process's is refused locally, before negotiation.
  Job elsewhere;
  elsewhere.entry.request = MakeRequest("other.gpu", OpType::kAllreduce, DataType::kFloat32,
                                        {{1}}, g_device + 1);
  AddTensor(&elsewhere, {1}, 1);
  RunAll(e, {&elsewhere});
  t->ExpectError("other.gpu.refused", elsewhere.status, Status::Code::kInvalidArgument,
                 "one GPU per process");
}

// See the file comment. Returns the process's exit status (survivors end the job first).
int FreezeTest(Engine* e, int rank) {
  const int64_t n = (64LL << 20) / 4;
  if (rank == 1) std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::raise(SIGSTOP);
    }).detach();
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0;; ++step) {
    Job job;
    job.entry.request = MakeRequest("freeze.allreduce", OpType::kAllreduce, DataType::kFloat32, {{n}});
    AddTensor(&job, std::vector<double>(n, 1.0), n);
    const auto call = std::chrono::steady_clock::now();
    RunAll(e, {&job});
    const auto now = std::chrono::steady_clock::now();
    if (job.status.ok()) {
      if (now - start > std::chrono::seconds(60)) Fatal("no error 60 s after rank 1 froze");
      continue;
    }
    const double since_start = std::chrono::duration<double>(now - start).count();
    const double call_s = std::chrono::duration<double>(now - call).count();
    const bool names = job.status.message().find("rank 1") != std::string::npos;
    std::printf("[rank %d] step %d failed %.2f s into its call, %.2f s after the start "
                "(rank 1 froze at ~2 s): %s\n",
                rank, step, call_s, since_start, job.status.message().c_str());
    std::printf("[rank %d] %s\n", rank, names && since_start < 2 + 5 + 10 ? "FREEZE OK" : "FREEZE FAILED");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the others print
    MPI_Abort(MPI_COMM_WORLD, names ? 0 : 1);
    return 1;
  }
}

}  // namespace
}  // namespace kerashvd

int main(int argc, char** argv) {
  using namespace kerashvd;
  using namespace kerashvd::gpu_engine_test;
  const bool freeze = argc > 1 && std::string(argv[1]) == "--freeze";
  std::unique_ptr<Engine> engine;
  Config config;
  config.stall_check_seconds = 30;
  config.stall_shutdown_seconds = 90;
  if (freeze) config.peer_timeout_seconds = 5;
  Status status = Engine::Create(config, CreateMpiWorld, &engine);
  if (!status.ok()) {
    std::fprintf(stderr, "Engine::Create failed: %s\n", status.message().c_str());
    return 1;
  }
  const Topology& topology = engine->topology();
  const int rank = topology.rank, size = topology.size;
  int devices = 0;
  CheckCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  g_device = topology.local_rank % devices;
  if (topology.local_size > devices) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", /*overwrite=*/0);
  CheckCuda(cudaSetDevice(g_device), "cudaSetDevice");
  std::printf("[rank %d/%d] GPU %d of %d\n", rank, size, g_device, devices);
  std::fflush(stdout);

  if (freeze) return FreezeTest(engine.get(), rank);
  Tally tally(rank);
  TestAllreduce(engine.get(), &tally, rank, size);
  TestManyAtOnce(engine.get(), &tally, rank, size);
  TestAllgather(engine.get(), &tally, rank, size);
  TestBroadcast(engine.get(), &tally, rank, size);
  TestAlltoall(engine.get(), &tally, rank, size);
  TestReducescatter(engine.get(), &tally, rank, size);
  TestMixedDevices(engine.get(), &tally, rank, size);
  TestProcessSets(engine.get(), &tally, rank, size);
  TestJoin(engine.get(), &tally, rank, size);
  TestErrors(engine.get(), &tally, rank, size);
  // The summary is collective over all ranks: stop the background thread first.
  engine->Shutdown();
  nccl_test::PrintSummary(tally, MPI_COMM_WORLD);
  const int failed = tally.failed();
  engine.reset();
  return failed == 0 ? 0 : 1;
}
