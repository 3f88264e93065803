// Helpers of kerashvd_gpu_engine_test: jobs (collectives with their GPU buffers) submitted
// to the engine, the values each rank contributes, and the checks of their outputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../../engine.h"
#include "nccl_test_harness.h"

namespace kerashvd {
namespace gpu_engine_test {

using namespace nccl_test;  // the harness: DeviceBuffer, Tally, Encode/Decode, CheckCuda, ...

extern int g_device;  // this process's GPU

// One submitted collective: its GPU buffers, its outcome, and the outputs the engine allocated.
struct Job {
  TensorEntry entry;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;  // inputs and preallocated outputs
  std::vector<std::unique_ptr<DeviceBuffer>> allocated;
  std::vector<int64_t> allocated_bytes;
  Status status;
  CollectiveResult result;
  bool submitted_ok = true;
};

// Submits every job, then waits (at most two minutes) until the engine has completed each.
void RunAll(Engine* engine, std::vector<Job*> jobs);
Request MakeRequest(const std::string& name, OpType op, DataType dtype, std::vector<Shape> shapes,
                    int device = g_device);
// Adds a device input holding `values` and (unless `allocate_later`) an output of `out_elements`.
void AddTensor(Job* job, const std::vector<double>& values, int64_t out_elements,
               bool allocate_later = false);
std::vector<double> Output(const Job& job, size_t i, int64_t elements);
// Element i of rank r's input.
double Value(int rank, int64_t i);
std::vector<double> Values(int rank, int64_t n, int64_t offset = 0);
// The sum of `ranks`' inputs.
std::vector<double> SumOver(const std::vector<int>& ranks, int64_t n, int64_t offset = 0);
void Check(Tally* tally, const std::string& name, const Job& job, const std::vector<double>& expected,
           size_t output = 0);

// Cases in files of their own.
void TestProcessSets(Engine* e, Tally* t, int rank, int size);  // gpu_engine_sets_test.cc

}  // namespace gpu_engine_test
}  // namespace kerashvd
