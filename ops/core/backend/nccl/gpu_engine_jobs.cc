#include "gpu_engine_jobs.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace kerashvd {
namespace gpu_engine_test {

int g_device = 0;

void RunAll(Engine* engine, std::vector<Job*> jobs) {
  std::mutex mutex;
  std::condition_variable cv;
  size_t pending = 0;
  for (Job* job : jobs) {
    job->entry.allocate = [job](size_t, const Shape& shape, void** data) {
      const int64_t bytes = NumElements(shape) * DataTypeSize(job->entry.request.dtype);
      job->allocated.push_back(std::make_unique<DeviceBuffer>(bytes));
      job->allocated_bytes.push_back(bytes);
      *data = job->allocated.back()->get();
      return Status::Ok();
    };
    job->entry.done = [job, &mutex, &cv, &pending](const Status& s, const CollectiveResult& r) {
      std::lock_guard<std::mutex> lock(mutex);
      job->status = s;
      job->result = r;
      --pending;
      cv.notify_all();
    };
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++pending;
    }
    Status s = engine->Submit(job->entry);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mutex);
      job->status = s;
      job->submitted_ok = false;
      --pending;
    }
  }
  std::unique_lock<std::mutex> lock(mutex);
  if (!cv.wait_for(lock, std::chrono::minutes(2), [&] { return pending == 0; }))
    Fatal("a collective did not complete within two minutes");
}

Request MakeRequest(const std::string& name, OpType op, DataType dtype, std::vector<Shape> shapes,
                    int device) {
  Request r;
  r.name = name;
  r.op_type = op;
  r.dtype = dtype;
  r.shapes = std::move(shapes);
  r.device = device;
  return r;
}

void AddTensor(Job* job, const std::vector<double>& values, int64_t out_elements,
               bool allocate_later) {
  const DataType dtype = job->entry.request.dtype;
  auto in = std::make_unique<DeviceBuffer>(values.size() * DataTypeSize(dtype));
  in->Upload(Encode(dtype, values));
  job->entry.inputs.push_back(in->get());
  job->buffers.push_back(std::move(in));
  if (allocate_later) {
    job->entry.outputs.push_back(nullptr);
    return;
  }
  auto out = std::make_unique<DeviceBuffer>(out_elements * DataTypeSize(dtype));
  job->entry.outputs.push_back(out->get());
  job->buffers.push_back(std::move(out));
}

std::vector<double> Output(const Job& job, size_t i, int64_t elements) {
  const DataType dtype = job.entry.request.dtype;
  const void* data = job.entry.outputs[i];
  if (data == nullptr) data = job.allocated.at(i)->get();
  std::vector<char> bytes(elements * DataTypeSize(dtype));
  if (elements > 0)
    CheckCuda(cudaMemcpy(bytes.data(), data, bytes.size(), cudaMemcpyDeviceToHost), "download");
  return Decode(dtype, bytes);
}

double Value(int rank, int64_t i) { return 1 + (i * 7 + rank * 3) % 11; }

std::vector<double> Values(int rank, int64_t n, int64_t offset) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Value(rank, i + offset);
  return v;
}

void Check(Tally* tally, const std::string& name, const Job& job, const std::vector<double>& expected,
           size_t output) {
  std::string mismatch;
  if (job.status.ok())
    mismatch = Compare(job.entry.request.dtype, expected,
                       Output(job, output, static_cast<int64_t>(expected.size())));
  tally->Record(name, job.status, mismatch);
}

std::vector<double> SumOver(const std::vector<int>& ranks, int64_t n, int64_t offset) {
  std::vector<double> sum(n, 0);
  for (int r : ranks)
    for (int64_t i = 0; i < n; ++i) sum[i] += Value(r, i + offset);
  return sum;
}

}  // namespace gpu_engine_test
}  // namespace kerashvd
