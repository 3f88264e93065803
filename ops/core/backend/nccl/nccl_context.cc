#include "nccl_context.h"

#include <chrono>
#include <sstream>
#include <thread>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 13, 0)
#error "kerashvd's NCCL backend needs NCCL 2.13 or newer (ncclGetLastError)"
#endif

namespace kerashvd {
namespace {

// Polls of a running collective before the waiting thread starts sleeping between polls:
// short collectives complete with microsecond latency, long ones don't burn a core.
constexpr int kSpinPolls = 2000;
constexpr auto kPollSleep = std::chrono::microseconds(50);

// Local setup before any collective step: device (-1: local_rank % count), stream, event, and
// (rank 0) the unique id.
Status SetUpLocal(int* device_inout, int local_rank, bool make_id, cudaStream_t* stream,
                  cudaEvent_t* event, ncclUniqueId* id) {
  int& device = *device_inout;
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess)
    return Status::FailedPrecondition(
        std::string("the NCCL backend needs a CUDA device, but cudaGetDeviceCount failed: ") +
        cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
  if (device < 0 && count > 0) device = local_rank % count;
  if (device < 0 || device >= count)
    return Status::InvalidArgument("the NCCL backend was asked for CUDA device " +
                                   std::to_string(device) + " but this process sees " +
                                   std::to_string(count) + " (check CUDA_VISIBLE_DEVICES)");
  KERASHVD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  KERASHVD_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  KERASHVD_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(event, cudaEventDisableTiming), "cudaEventCreate"));
  if (make_id) KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(id), "ncclGetUniqueId"));
  return Status::Ok();
}

// Makes a local outcome collective: every rank learns whether all ranks succeeded, so a
// failure on one rank fails Create everywhere instead of leaving the others waiting.
Status AgreeAll(const MpiContext& mpi, const Status& local, const char* step) {
  int ok = local.ok() ? 1 : 0, all_ok = 0;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(
      MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mpi.comm()), "MPI_Allreduce"));
  if (!local.ok()) return local;
  if (!all_ok)
    return Status::Aborted(std::string("NCCL setup failed on another rank during ") + step +
                           "; see that rank's error");
  return Status::Ok();
}

}  // namespace

Status NcclStatus(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return Status::Ok();
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') message += std::string(" (NCCL: ") + last + ")";
  return Status::Internal(message);
}

Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorName(error) + ": " +
                          cudaGetErrorString(error));
}

Status NcclContext::Create(const MpiContext& mpi, int device, double timeout_seconds,
                           std::unique_ptr<NcclContext>* out, const AbortFlag* abort) {
  std::unique_ptr<NcclContext> ctx(new NcclContext());
  ctx->rank_ = mpi.rank();
  ctx->size_ = mpi.size();
  ctx->timeout_seconds_ = timeout_seconds;
  ctx->abort_ = abort;

  ncclUniqueId id{};
  Status local = SetUpLocal(&device, mpi.local_rank(), mpi.rank() == 0, &ctx->stream_,
                            &ctx->event_, &id);
  ctx->device_ = device;
  KERASHVD_RETURN_IF_ERROR(AgreeAll(mpi, local, "device setup"));
  KERASHVD_RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi.comm()), "MPI_Bcast(ncclUniqueId)"));
  local = NcclStatus(ncclCommInitRank(&ctx->comm_, ctx->size_, id, ctx->rank_),
                     "ncclCommInitRank");
  KERASHVD_RETURN_IF_ERROR(AgreeAll(mpi, local, "ncclCommInitRank"));
  *out = std::move(ctx);
  return Status::Ok();
}

NcclContext::~NcclContext() {
  // Errors are ignored: nothing can be reported from here, and at process exit the CUDA
  // driver may already be shutting down.
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
  }
  if (event_ != nullptr) cudaEventDestroy(event_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status NcclContext::Begin(const char* what) {
  if (aborted_)
    return Status::FailedPrecondition(std::string(what) +
                                      " cannot run: the NCCL communicator was aborted after an "
                                      "earlier error: " + abort_reason_);
  return CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
}

Status NcclContext::Wait(const char* what) {
  KERASHVD_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(event_, stream_), "cudaEventRecord"));
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;;) {
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaSuccess) return Status::Ok();
    if (error != cudaErrorNotReady) return Abort(CudaStatus(error, what));
    ncclResult_t async = ncclSuccess;
    KERASHVD_RETURN_IF_ERROR(
        NcclStatus(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError"));
    if (async != ncclSuccess) return Abort(NcclStatus(async, what));
    if (abort_ != nullptr && abort_->is_set()) return Abort(abort_->status());
    if (timeout_seconds_ > 0) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      if (elapsed.count() > timeout_seconds_) {
        std::ostringstream message;
        message << what << " did not complete within " << timeout_seconds_ << " s on rank "
                << rank_ << ": another rank may have died or stopped calling collectives.";
        return Abort(Status::Aborted(message.str()));
      }
    }
    if (polls < kSpinPolls) {
      ++polls;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

Status NcclContext::Abort(Status reason) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  aborted_ = true;
  abort_reason_ = reason.message();
  return Status(reason.code(), reason.message() +
                                   " The NCCL communicator was aborted; this process cannot run "
                                   "more GPU collectives.");
}

}  // namespace kerashvd
