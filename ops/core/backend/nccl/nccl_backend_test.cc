// kerashvd_nccl_test: every NcclBackend method on GPU buffers, checked against a host reference.
// No TensorFlow, no Python: only the engine core, MPI, CUDA and NCCL.
//
//   mpiexec -n 2 ./kerashvd_nccl_test
//
// Each rank uses CUDA device local_rank % device_count; when ranks outnumber the GPUs on a
// host, NCCL_MULTI_RANK_GPU_ENABLE=1 is set for NCCL (unless already set), which NCCL >= 2.32
// needs to let ranks share a GPU. Every rank runs the same cases in the same order (they are
// collectives) and checks its own results. Element counts include 0, 1, 7 (odd, not a multiple
// of the world size) and 1M. Inputs are small integers, so sums, products, minima and maxima
// are exact in every dtype for up to 8 ranks, and each rank computes the expected result
// without communicating. Min and Max of float32/float64 also run on NaN, infinities and
// signed zeros, compared bit for bit with numpy's rule. The last line, printed by rank 0, is "N passed, N failed" summed over
// all ranks; the exit status is non-zero when any case failed on any rank.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../buffer_ops.h"
#include "../mpi/mpi_context.h"
#include "nccl_backend.h"
#include "nccl_context.h"
#include "nccl_test_harness.h"

namespace kerashvd {
namespace {

using nccl_test::CheckCuda;
using nccl_test::Compare;
using nccl_test::Decode;
using nccl_test::DeviceBuffer;
using nccl_test::Encode;
using nccl_test::Fatal;
using nccl_test::PrintSummary;
using nccl_test::Tally;

const std::vector<int64_t> kSizes = {0, 1, 7, 1 << 20};
const std::vector<DataType> kReducible = {
    DataType::kFloat32, DataType::kFloat64, DataType::kInt8,    DataType::kUint8,
    DataType::kInt32,   DataType::kInt64,   DataType::kFloat16, DataType::kBfloat16};

struct World {
  Backend* backend;
  Tally* tally;
  int rank;
  int size;
};

std::string CaseName(const char* op, DataType dtype, const std::string& detail, int64_t n) {
  return std::string(op) + " " + DataTypeName(dtype) + " " + detail + " n=" + std::to_string(n);
}

// Inputs for reductions: products stay within int8 for 8 ranks; the rest within 11 * ranks.
double ReduceInput(ReduceOp op, int rank, int64_t i) {
  if (op == ReduceOp::kProduct) return (rank < 6 && (i + rank) % 2 == 1) ? 2 : 1;
  return 1 + (i * 7 + rank * 3) % 11;
}

double Reduce(ReduceOp op, int size, int64_t i) {
  double acc = ReduceInput(op, 0, i);
  for (int r = 1; r < size; ++r) {
    const double x = ReduceInput(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += x; break;
      case ReduceOp::kMin: acc = std::fmin(acc, x); break;
      case ReduceOp::kMax: acc = std::fmax(acc, x); break;
      case ReduceOp::kProduct: acc *= x; break;
    }
  }
  return op == ReduceOp::kAverage ? acc / size : acc;
}

std::vector<ReduceOp> OpsFor(DataType dtype) {
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                               ReduceOp::kProduct};
  if (IsFloating(dtype)) ops.push_back(ReduceOp::kAverage);
  return ops;
}

// Rows of a reducescatter result, as the executor splits them: the first n % size get one more.
std::vector<int64_t> ScatterCounts(int64_t n, int size) {
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = n / size + (r < n % size ? 1 : 0);
  return counts;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  return offsets;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t total = 0;
  for (int64_t x : v) total += x;
  return total;
}

// --- Cases ----------------------------------------------------------------------------------

void TestAllreduce(const World& w) {
  for (DataType dtype : kReducible) {
    const size_t element = DataTypeSize(dtype);
    for (ReduceOp op : OpsFor(dtype)) {
      for (int64_t n : kSizes) {
        std::vector<double> mine(n), expected(n);
        for (int64_t i = 0; i < n; ++i) {
          mine[i] = ReduceInput(op, w.rank, i);
          expected[i] = Reduce(op, w.size, i);
        }
        const std::vector<char> input = Encode(dtype, mine);
        for (bool in_place : {false, true}) {
          DeviceBuffer send(n * element), recv(n * element);
          (in_place ? recv : send).Upload(input);
          const void* source = in_place ? recv.get() : send.get();
          Status status = w.backend->Allreduce(source, recv.get(), n, dtype, ReduceOptions{op});
          std::string mismatch;
          if (status.ok())
            mismatch = Compare(dtype, expected, Decode(dtype, recv.Download(0, n * element)));
          w.tally->Record(CaseName("Allreduce", dtype, std::string(ReduceOpName(op)) +
                                                           (in_place ? " in-place" : ""), n),
                          status, mismatch);
        }
      }
    }
  }
}

void TestAllgatherv(const World& w) {
  for (DataType dtype : {DataType::kUint8, DataType::kFloat32}) {
    const size_t element = DataTypeSize(dtype);
    for (int64_t base : kSizes) {
      for (const std::string pattern : {"equal", "equal in-place", "uneven"}) {
        const bool uneven = pattern == "uneven";
        const bool in_place = pattern == "equal in-place";
        std::vector<int64_t> counts(w.size), bytes(w.size);
        for (int r = 0; r < w.size; ++r) {
          counts[r] = base + (uneven ? r : 0);
          bytes[r] = counts[r] * element;
        }
        const std::vector<int64_t> offsets = Offsets(bytes);
        auto value = [](int rank, int64_t i) {
          return static_cast<double>((rank * 37 + i) % 251);
        };
        std::vector<double> mine(counts[w.rank]), expected;
        for (int64_t i = 0; i < counts[w.rank]; ++i) mine[i] = value(w.rank, i);
        for (int r = 0; r < w.size; ++r)
          for (int64_t i = 0; i < counts[r]; ++i) expected.push_back(value(r, i));

        DeviceBuffer send(in_place ? 0 : bytes[w.rank]), recv(Sum(bytes));
        const char* source;
        if (in_place) {
          recv.Upload(Encode(dtype, mine), offsets[w.rank]);
          source = recv.get() + offsets[w.rank];
        } else {
          send.Upload(Encode(dtype, mine));
          source = send.get();
        }
        Status status = w.backend->Allgatherv(source, recv.get(), bytes);
        std::string mismatch;
        if (status.ok())
          mismatch = Compare(dtype, expected, Decode(dtype, recv.Download(0, Sum(bytes))));
        w.tally->Record(CaseName("Allgatherv", dtype, pattern, base), status, mismatch);
      }
    }
  }
}

void TestBroadcast(const World& w) {
  const DataType dtype = DataType::kFloat32;
  for (int root = 0; root < w.size; ++root) {
    for (int64_t n : kSizes) {
      std::vector<double> expected(n);
      for (int64_t i = 0; i < n; ++i) expected[i] = (root * 1000 + i) % 4096;
      DeviceBuffer buffer(n * sizeof(float));
      if (w.rank == root) buffer.Upload(Encode(dtype, expected));
      const int64_t bytes = n * sizeof(float);
      Status status = w.backend->Broadcast(buffer.get(), bytes, BroadcastOptions{root});
      std::string mismatch;
      if (status.ok())
        mismatch = Compare(dtype, expected, Decode(dtype, buffer.Download(0, bytes)));
      w.tally->Record(CaseName("Broadcast", dtype, "root=" + std::to_string(root), n), status,
                      mismatch);
    }
  }
}

void TestAlltoallv(const World& w) {
  const DataType dtype = DataType::kInt32;
  const size_t element = sizeof(int32_t);
  for (int64_t base : kSizes) {
    for (const std::string pattern : {"dense", "sparse"}) {
      const bool sparse = pattern == "sparse";
      // Elements that rank `src` sends to rank `dst`.
      auto count = [&](int src, int dst) -> int64_t {
        return sparse ? ((src + dst) % 2 == 0 ? base : 0) : base + src + 2 * dst;
      };
      auto value = [](int src, int dst, int64_t i) {
        return static_cast<double>((src * 131 + dst * 17 + i) % 100003);
      };
      std::vector<int64_t> send_bytes(w.size), recv_bytes(w.size);
      std::vector<double> mine, expected;
      for (int p = 0; p < w.size; ++p) {
        send_bytes[p] = count(w.rank, p) * element;
        recv_bytes[p] = count(p, w.rank) * element;
        for (int64_t i = 0; i < count(w.rank, p); ++i) mine.push_back(value(w.rank, p, i));
        for (int64_t i = 0; i < count(p, w.rank); ++i) expected.push_back(value(p, w.rank, i));
      }
      DeviceBuffer send(Sum(send_bytes)), recv(Sum(recv_bytes));
      send.Upload(Encode(dtype, mine));
      Status status = w.backend->Alltoallv(send.get(), send_bytes, recv.get(), recv_bytes);
      std::string mismatch;
      if (status.ok())
        mismatch = Compare(dtype, expected, Decode(dtype, recv.Download(0, Sum(recv_bytes))));
      w.tally->Record(CaseName("Alltoallv", dtype, pattern, base), status, mismatch);
    }
  }
}

void TestReduceScatter(const World& w) {
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back((1 << 20) + 1);  // large and uneven
  for (DataType dtype : kReducible) {
    const size_t element = DataTypeSize(dtype);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t n : sizes) {
        const std::vector<int64_t> counts = ScatterCounts(n, w.size);
        const std::vector<int64_t> offsets = Offsets(counts);
        const int64_t mine = counts[w.rank];
        std::vector<double> input(n), expected(mine);
        for (int64_t i = 0; i < n; ++i) input[i] = ReduceInput(op, w.rank, i);
        for (int64_t i = 0; i < mine; ++i) expected[i] = Reduce(op, w.size, offsets[w.rank] + i);
        // In place (the result is this rank's block of the input) only where NCCL defines it:
        // equal counts.
        const bool even = n % w.size == 0;
        for (bool in_place : {false, true}) {
          if (in_place && !even) continue;
          DeviceBuffer send(n * element), recv(in_place ? 0 : mine * element);
          send.Upload(Encode(dtype, input));
          char* out = in_place ? send.get() + offsets[w.rank] * element : recv.get();
          Status status = w.backend->ReduceScatter(send.get(), out, counts, dtype,
                                                   ReduceOptions{op});
          std::string mismatch;
          if (status.ok()) {
            const DeviceBuffer& holder = in_place ? send : recv;
            const size_t at = in_place ? offsets[w.rank] * element : 0;
            mismatch =
                Compare(dtype, expected, Decode(dtype, holder.Download(at, mine * element)));
          }
          w.tally->Record(CaseName("ReduceScatter", dtype, std::string(ReduceOpName(op)) +
                                                               (in_place ? " in-place" : ""), n),
                          status, mismatch);
        }
      }
    }
  }
}

// --- NaN, infinities and signed zeros in Min and Max ------------------------------------------
// kerashvd's rule, numpy's np.minimum/np.maximum: NaN on any rank makes the element the
// canonical quiet NaN everywhere; Max prefers +0.0 to -0.0 and Min -0.0 to +0.0. Results are
// compared bit for bit.

// Position k < size is NaN on rank k only; `size` is NaN everywhere; size + 1 is -inf on rank
// 0 and NaN on the last rank; size + 2 is -0.0 on even ranks and +0.0 on odd ones; size + 3 is
// +inf on the last rank; beyond, finite values of both signs, and every 97th element is NaN
// on rank (i % size).
double NanCaseInput(int rank, int size, int64_t i) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  if (i < size) return i == rank ? nan : 1.0 + i;
  if (i == size) return nan;
  if (i == size + 1) return rank == 0 ? -inf : (rank == size - 1 ? nan : 1.0);
  if (i == size + 2) return rank % 2 == 0 ? -0.0 : 0.0;
  if (i == size + 3) return rank == size - 1 ? inf : 2.0;
  if (i % 97 == 0 && i % size == rank) return nan;
  return static_cast<double>((i * 7 + rank * 3) % 11) - 5.5;
}

double NanCaseExpected(ReduceOp op, int size, int64_t i) {
  double acc = NanCaseInput(0, size, i);
  for (int r = 0; r < size; ++r) {
    const double x = NanCaseInput(r, size, i);
    if (std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
    const bool better = op == ReduceOp::kMax ? (x > acc || (x == acc && !std::signbit(x)))
                                             : (x < acc || (x == acc && std::signbit(x)));
    if (better) acc = x;
  }
  return acc;
}

// Empty when the bytes are equal; otherwise the first differing element and how many differ.
std::string CompareBits(DataType dtype, const std::vector<char>& expected,
                        const std::vector<char>& actual) {
  const size_t element = DataTypeSize(dtype);
  if (expected.size() != actual.size()) return "wrong size";
  int64_t first = -1, wrong = 0;
  for (size_t i = 0; i * element < expected.size(); ++i) {
    if (std::memcmp(&expected[i * element], &actual[i * element], element) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++wrong;
    }
  }
  if (wrong == 0) return "";
  const std::vector<double> want = Decode(dtype, expected), got = Decode(dtype, actual);
  return "element " + std::to_string(first) + ": expected " + std::to_string(want[first]) +
         ", got " + std::to_string(got[first]) + " (" + std::to_string(wrong) + " differ)";
}

void TestNanMinMax(const World& w) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const size_t element = DataTypeSize(dtype);
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      for (int64_t n : {static_cast<int64_t>(w.size) + 4, int64_t{1 << 20} + 1}) {
        std::vector<double> input(n), expected(n);
        for (int64_t i = 0; i < n; ++i) {
          input[i] = NanCaseInput(w.rank, w.size, i);
          expected[i] = NanCaseExpected(op, w.size, i);
        }
        const std::string name = std::string(ReduceOpName(op)) + " NaN";
        for (bool in_place : {false, true}) {  // allreduce
          DeviceBuffer send(n * element), recv(n * element);
          (in_place ? recv : send).Upload(Encode(dtype, input));
          Status status = w.backend->Allreduce(in_place ? recv.get() : send.get(), recv.get(), n,
                                               dtype, ReduceOptions{op});
          w.tally->Record(CaseName("Allreduce", dtype, name + (in_place ? " in-place" : ""), n),
                          status,
                          status.ok() ? CompareBits(dtype, Encode(dtype, expected),
                                                    recv.Download(0, n * element))
                                      : "");
        }
        const std::vector<int64_t> counts = ScatterCounts(n, w.size);  // reducescatter
        const std::vector<int64_t> offsets = Offsets(counts);
        const std::vector<double> mine(expected.begin() + offsets[w.rank],
                                       expected.begin() + offsets[w.rank] + counts[w.rank]);
        DeviceBuffer send(n * element), recv(counts[w.rank] * element);
        send.Upload(Encode(dtype, input));
        Status status = w.backend->ReduceScatter(send.get(), recv.get(), counts, dtype,
                                                 ReduceOptions{op});
        w.tally->Record(CaseName("ReduceScatter", dtype, name, n), status,
                        status.ok() ? CompareBits(dtype, Encode(dtype, mine),
                                                  recv.Download(0, counts[w.rank] * element))
                                    : "");
      }
    }
  }
}

void TestMetadata(const World& w) {
  for (int64_t k : {0, 1, 3}) {
    std::vector<int64_t> send(k), recv(k * w.size, -1), expected(k * w.size);
    for (int64_t j = 0; j < k; ++j) send[j] = w.rank * 10 + j;
    for (int r = 0; r < w.size; ++r)
      for (int64_t j = 0; j < k; ++j) expected[r * k + j] = r * 10 + j;
    Status status = w.backend->AllgatherInt64(send.data(), k, recv.data());
    w.tally->Record("AllgatherInt64 k=" + std::to_string(k), status,
                    recv == expected ? "" : "wrong values");
  }
  std::vector<int64_t> send(w.size), recv(w.size, -1), expected(w.size);
  for (int p = 0; p < w.size; ++p) {
    send[p] = w.rank * 100 + p;
    expected[p] = p * 100 + w.rank;
  }
  Status status = w.backend->AlltoallInt64(send.data(), recv.data());
  w.tally->Record("AlltoallInt64", status, recv == expected ? "" : "wrong values");
}

// Unsupported or invalid requests fail the same way on every rank, before any NCCL call.
void TestErrors(const World& w) {
  DeviceBuffer buffer(64);
  w.tally->ExpectError("Allreduce int16 is Unimplemented",
                       w.backend->Allreduce(buffer.get(), buffer.get(), 4, DataType::kInt16,
                                            ReduceOptions{}),
                       Status::Code::kUnimplemented);
  w.tally->ExpectError("ReduceScatter bool is Unimplemented",
                       w.backend->ReduceScatter(buffer.get(), buffer.get(),
                                                std::vector<int64_t>(w.size, 1), DataType::kBool,
                                                ReduceOptions{}),
                       Status::Code::kUnimplemented);
  w.tally->ExpectError("Broadcast root out of range",
                       w.backend->Broadcast(buffer.get(), 4, BroadcastOptions{w.size}),
                       Status::Code::kInvalidArgument);
  w.tally->ExpectError("Allgatherv sizes not one per rank",
                       w.backend->Allgatherv(buffer.get(), buffer.get(),
                                             std::vector<int64_t>(w.size + 1, 1)),
                       Status::Code::kInvalidArgument);
}

int Main() {
  std::unique_ptr<MpiContext> mpi;
  Status status = MpiContext::Create(&mpi);
  if (!status.ok()) {
    std::fprintf(stderr, "kerashvd_nccl_test: %s\n", status.message().c_str());
    return 1;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const int device = devices > 0 ? mpi->local_rank() % devices : 0;
  // This program's CUDA runtime is its own (kerashvd_core links a private static copy), so it
  // selects the device for its own allocations too.
  if (devices > 0) CheckCuda(cudaSetDevice(device), "cudaSetDevice");
  if (devices > 0 && mpi->local_size() > devices) {
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", /*overwrite=*/0);
    if (mpi->rank() == 0)
      std::printf("%d ranks per host share %d GPU(s): NCCL_MULTI_RANK_GPU_ENABLE=%s\n",
                  mpi->local_size(), devices, std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"));
  }
  int version = 0;
  ncclGetVersion(&version);
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf("[rank %d/%d] CUDA device %d of %d, NCCL %d, CUDA runtime %d, driver %d\n",
              mpi->rank(), mpi->size(), device, devices, version, runtime, driver);
  std::fflush(stdout);

  std::unique_ptr<NcclContext> nccl;
  status = NcclContext::Create(*mpi, device, /*timeout_seconds=*/120, &nccl);
  Tally tally(mpi->rank());
  tally.Record("NcclContext::Create", status, "");
  if (status.ok()) {
    NcclBackend backend(nccl.get(), mpi.get());
    const World world{&backend, &tally, mpi->rank(), mpi->size()};
    const std::vector<std::pair<const char*, void (*)(const World&)>> groups = {
        {"Allreduce", TestAllreduce},         {"Allgatherv", TestAllgatherv},
        {"Broadcast", TestBroadcast},         {"Alltoallv", TestAlltoallv},
        {"ReduceScatter", TestReduceScatter}, {"Min/Max with NaN", TestNanMinMax},
        {"AllgatherInt64/AlltoallInt64", TestMetadata},
        {"errors", TestErrors}};
    for (const auto& group : groups) {
      group.second(world);
      if (mpi->rank() == 0) {  // progress, so that a hang can be placed
        std::printf("[rank 0] %s done: %d passed, %d failed so far on this rank\n", group.first,
                    tally.passed(), tally.failed());
        std::fflush(stdout);
      }
    }
  }
  PrintSummary(tally, mpi->comm());
  // Every rank exits with the same status, so mpiexec reports a failure wherever it happened.
  int failed = tally.failed(), any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, mpi->comm());
  return any_failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kerashvd

int main() { return kerashvd::Main(); }
