// Backend: the data plane. One small interface, one implementation per library (MPI for host
// memory, NCCL for GPU memory); the engine picks one per tensor by its device.
//
// Every collective takes the same leading arguments (send, recv, count or bytes, dtype) in the
// order NCCL uses, plus an options struct. An operation a backend cannot run returns
// Unimplemented naming the backend. Reductions receive only natively reducible types in their
// wire type (WireType in types.h: float16/bfloat16 Min and Max widened to float32), and
// Average already turned into Sum.
#pragma once

#include <cstdint>
#include <vector>

#include "../status.h"
#include "../types.h"

namespace kerashvd {

struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;  // kSum, kMin, kMax or kProduct
  // Agreed by all ranks: some rank's call is out of place (send != recv). A backend may use
  // it to choose its algorithm; whether this rank's own call is in place is send == recv.
  bool any_out_of_place = false;
};

// One tensor of a fused allreduce, read and written where it is instead of through a fusion
// buffer: `count` elements from `send` into `recv` (equal: in place), the reduced values
// multiplied by `postscale` as ScaleCopy does (buffer_ops.h).
struct AllreduceSpan {
  const void* send;
  void* recv;
  int64_t count;
  double postscale;
};

struct BroadcastOptions {
  int root = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // send == recv reduces in place.
  virtual Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                           const ReduceOptions& options) = 0;
  // Whether AllreduceSpans takes `dtype` with `op`. The answer must be the same on every
  // rank (it may depend on the communicator, the dtype and the op only): every rank then
  // runs the same kind of call.
  virtual bool ReducesSpans(DataType dtype, ReduceOp op) const {
    (void)dtype, (void)op;
    return false;
  }
  // The allreduce of the spans laid end to end, as Allreduce of their fusion would be,
  // followed by each span's postscale: no fusion buffer, no copies in or out.
  virtual Status AllreduceSpans(const std::vector<AllreduceSpan>& spans, DataType dtype,
                                const ReduceOptions& options) {
    (void)spans, (void)dtype, (void)options;
    return Status::Unimplemented(std::string(name()) + " does not reduce spans");
  }
  // recv_bytes[r]: bytes contributed by rank r, laid out in rank order in `recv`.
  virtual Status Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) = 0;
  virtual Status Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) = 0;
  virtual Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                           const std::vector<int64_t>& recv_bytes) = 0;
  // recv_counts[r]: elements of the reduced result that rank r receives.
  virtual Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                               DataType dtype, const ReduceOptions& options) = 0;
  // Small metadata exchanges (first dimensions, alltoall splits) on host memory.
  virtual Status AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) = 0;
  virtual Status AlltoallInt64(const int64_t* send, int64_t* recv) = 0;
};

}  // namespace kerashvd
