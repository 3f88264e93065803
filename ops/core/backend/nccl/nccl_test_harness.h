// Test harness of kerashvd_nccl_test: device buffers, host encoding of dtypes, comparison
// against a reference, and the pass/fail tally printed as "N passed, N failed".
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "../../status.h"
#include "../../types.h"

namespace kerashvd {
namespace nccl_test {

// A failure of the test's own plumbing (allocation, copies): stop every rank at once rather
// than leave the others waiting in a collective.
[[noreturn]] void Fatal(const std::string& message);
void CheckCuda(cudaError_t error, const char* call);

// Device memory filled with 0xA5, so stale results never pass.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  char* get() const { return static_cast<char*>(ptr_); }
  void Upload(const std::vector<char>& host, size_t offset = 0);
  std::vector<char> Download(size_t offset, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// Host values: doubles in, dtype bytes out, and back.
std::vector<char> Encode(DataType dtype, const std::vector<double>& v);
std::vector<double> Decode(DataType dtype, const std::vector<char>& bytes);
// Empty when equal (exactly for integers, to a dtype-sized tolerance for floats); otherwise
// the first wrong element and how many are wrong.
std::string Compare(DataType dtype, const std::vector<double>& expected,
                    const std::vector<double>& actual);

class Tally {
 public:
  explicit Tally(int rank) : rank_(rank) {}
  // One case: the backend's status, then (when it succeeded) the comparison's verdict.
  void Record(const std::string& name, const Status& status, const std::string& mismatch);
  // A case that must fail with `code` and a message containing `must_name` (the backend, by
  // default).
  void ExpectError(const std::string& name, const Status& status, Status::Code code,
                   const std::string& must_name = "NCCL");
  int passed() const { return passed_; }
  int failed() const { return failed_; }
  const std::string& report() const { return report_; }

 private:
  void Fail(const std::string& name, const std::string& why);

  int rank_;
  int passed_ = 0;
  int failed_ = 0;
  std::string report_;  // printed by rank 0 at the end, in rank order, before the totals
};

// Every rank's failure lines, printed by rank 0 in rank order, then the totals as the last line.
// Collective over `comm`.
void PrintSummary(const Tally& tally, MPI_Comm comm);

}  // namespace nccl_test
}  // namespace kerashvd
