#include "nccl_test_harness.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../../buffer_ops.h"
#include "nccl_context.h"

namespace kerashvd {
namespace nccl_test {

[[noreturn]] void Fatal(const std::string& message) {
  std::fprintf(stderr, "kerashvd_nccl_test: %s\n", message.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();  // MPI_Abort does not return; this tells the compiler so
}

void CheckCuda(cudaError_t error, const char* call) {
  Status status = CudaStatus(error, call);
  if (!status.ok()) Fatal(status.message());
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes_ == 0) return;  // zero-sized tensors may well have null data
  CheckCuda(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
  CheckCuda(cudaMemset(ptr_, 0xA5, bytes_), "cudaMemset");  // stale results must not pass
  // cudaMemset is asynchronous and the backend's stream does not wait for the default stream:
  // without this the fill could land after a collective has written its result.
  CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

void DeviceBuffer::Upload(const std::vector<char>& host, size_t offset) {
  if (host.empty()) return;
  CheckCuda(cudaMemcpy(get() + offset, host.data(), host.size(), cudaMemcpyHostToDevice),
            "cudaMemcpy to device");
  // A pageable upload may return before the DMA has finished; see the constructor.
  CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

std::vector<char> DeviceBuffer::Download(size_t offset, size_t bytes) const {
  std::vector<char> host(bytes);
  if (bytes > 0)
    CheckCuda(cudaMemcpy(host.data(), get() + offset, bytes, cudaMemcpyDeviceToHost),
              "cudaMemcpy to host");
  return host;
}

namespace {

template <typename T>
void PutAll(const std::vector<double>& v, char* out) {
  T* p = reinterpret_cast<T*>(out);
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
}

template <typename T>
void GetAll(const char* in, std::vector<double>* v) {
  const T* p = reinterpret_cast<const T*>(in);
  for (size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<double>(p[i]);
}

}  // namespace

std::vector<char> Encode(DataType dtype, const std::vector<double>& v) {
  std::vector<char> out(v.size() * DataTypeSize(dtype));
  switch (dtype) {
    case DataType::kUint8: PutAll<uint8_t>(v, out.data()); break;
    case DataType::kInt8: PutAll<int8_t>(v, out.data()); break;
    case DataType::kInt32: PutAll<int32_t>(v, out.data()); break;
    case DataType::kInt64: PutAll<int64_t>(v, out.data()); break;
    case DataType::kFloat32: PutAll<float>(v, out.data()); break;
    case DataType::kFloat64: PutAll<double>(v, out.data()); break;
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      std::vector<float> f(v.begin(), v.end());
      FloatToHalf(f.data(), out.data(), f.size(), dtype, 1.0);
      break;
    }
    default: Fatal(std::string("no encoder for ") + DataTypeName(dtype));
  }
  return out;
}

std::vector<double> Decode(DataType dtype, const std::vector<char>& bytes) {
  std::vector<double> v(bytes.size() / DataTypeSize(dtype));
  switch (dtype) {
    case DataType::kUint8: GetAll<uint8_t>(bytes.data(), &v); break;
    case DataType::kInt8: GetAll<int8_t>(bytes.data(), &v); break;
    case DataType::kInt32: GetAll<int32_t>(bytes.data(), &v); break;
    case DataType::kInt64: GetAll<int64_t>(bytes.data(), &v); break;
    case DataType::kFloat32: GetAll<float>(bytes.data(), &v); break;
    case DataType::kFloat64: GetAll<double>(bytes.data(), &v); break;
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      std::vector<float> f(v.size());
      HalfToFloat(bytes.data(), f.data(), f.size(), dtype, 1.0);
      for (size_t i = 0; i < v.size(); ++i) v[i] = f[i];
      break;
    }
    default: Fatal(std::string("no decoder for ") + DataTypeName(dtype));
  }
  return v;
}

std::string Compare(DataType dtype, const std::vector<double>& expected,
                    const std::vector<double>& actual) {
  if (expected.size() != actual.size())
    return "expected " + std::to_string(expected.size()) + " elements, got " +
           std::to_string(actual.size());
  double tolerance = 0;
  if (dtype == DataType::kFloat16 || dtype == DataType::kBfloat16) tolerance = 1e-2;
  if (dtype == DataType::kFloat32) tolerance = 1e-5;
  if (dtype == DataType::kFloat64) tolerance = 1e-12;
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::fabs(expected[i] - actual[i]) <= tolerance * std::fmax(1.0, std::fabs(expected[i])))
      continue;
    if (wrong++ == 0) first = static_cast<int64_t>(i);
  }
  if (wrong == 0) return "";
  return std::to_string(wrong) + " wrong elements; first at " + std::to_string(first) +
         ": expected " + std::to_string(expected[first]) + ", got " +
         std::to_string(actual[first]);
}

void Tally::Record(const std::string& name, const Status& status, const std::string& mismatch) {
  if (status.ok() && mismatch.empty()) {
    ++passed_;
    return;
  }
  Fail(name, status.ok() ? mismatch : status.message());
}

void Tally::ExpectError(const std::string& name, const Status& status, Status::Code code,
                        const std::string& must_name) {
  if (status.code() == code && status.message().find(must_name) != std::string::npos) {
    ++passed_;
    return;
  }
  Fail(name, "expected an error with code " + std::to_string(static_cast<int>(code)) +
                 " naming '" + must_name + "', got code " + std::to_string(static_cast<int>(status.code())) +
                 ": '" + status.message() + "'");
}

void Tally::Fail(const std::string& name, const std::string& why) {
  ++failed_;
  report_ += "[rank " + std::to_string(rank_) + "] FAIL " + name + ": " + why + "\n";
}

void PrintSummary(const Tally& tally, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string& mine = tally.report();
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), offsets(size, 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(rank == 0 ? offsets.back() + lengths.back() : 0, '\0');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, &all[0], lengths.data(), offsets.data(), MPI_CHAR,
              0, comm);
  int local[2] = {tally.passed(), tally.failed()}, total[2] = {0, 0};
  MPI_Reduce(local, total, 2, MPI_INT, MPI_SUM, 0, comm);
  if (rank == 0) std::printf("%s%d passed, %d failed\n", all.c_str(), total[0], total[1]);
  std::fflush(stdout);
}

}  // namespace nccl_test
}  // namespace kerashvd
