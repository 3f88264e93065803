#include "mpi_context.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "../../types.h"

namespace kerashvd {
namespace {

std::once_flag finalize_registered;
std::atomic<bool> mpi_broken{false};

void FinalizeAtExit() {
  if (mpi_broken) return;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace

void MarkMpiBroken() { mpi_broken = true; }
bool MpiBroken() { return mpi_broken; }

Status MpiStatus(int code, const char* call) {
  if (code == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Internal(std::string(call) + " failed: " + std::string(text, len));
}

MPI_Datatype MpiDatatype(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBfloat16: return MPI_UINT16_T;  // with MpiOp's operations (mpi_reduce_ops.h)
    default: return MPI_DATATYPE_NULL;  // not reducible by MPI directly
  }
}

Status MpiContext::Create(std::unique_ptr<MpiContext>* out) {
  std::unique_ptr<MpiContext> ctx(new MpiContext());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (mpi_broken)
    return Status::FailedPrecondition(
        "kerashvd cannot start again in this process: a peer rank failed earlier and MPI is no "
        "longer usable. Restart the job.");
  if (finalized)
    return Status::FailedPrecondition(
        "MPI was already finalized in this process (by mpi4py or another library), so kerashvd "
        "cannot start. Call kerashvd.init() before MPI.Finalize().");
  if (!initialized) {
    int provided = 0;
    KERASHVD_RETURN_IF_ERROR(MpiStatus(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    std::call_once(finalize_registered, [] { std::atexit(FinalizeAtExit); });
  }
  MPI_Query_thread(&ctx->thread_level_);
  KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &ctx->comm_), "MPI_Comm_dup"));
  // Errors are returned to us and become Status, never an abort of the process.
  MPI_Comm_set_errhandler(ctx->comm_, MPI_ERRORS_RETURN);
  KERASHVD_RETURN_IF_ERROR(ctx->Describe());
  *out = std::move(ctx);
  return Status::Ok();
}

Status MpiContext::FromComm(MPI_Comm comm, std::unique_ptr<MpiContext>* out) {
  std::unique_ptr<MpiContext> ctx(new MpiContext());
  ctx->comm_ = comm;
  MPI_Comm_set_errhandler(ctx->comm_, MPI_ERRORS_RETURN);
  MPI_Query_thread(&ctx->thread_level_);
  KERASHVD_RETURN_IF_ERROR(ctx->Describe());
  *out = std::move(ctx);
  return Status::Ok();
}

Topology MpiContext::topology() const {
  Topology t;
  t.rank = rank_;
  t.size = size_;
  t.local_rank = local_rank_;
  t.local_size = local_size_;
  t.cross_rank = cross_rank_;
  t.cross_size = cross_size_;
  t.homogeneous = homogeneous_;
  t.threads_supported = threads_supported();
  return t;
}

Status MpiContext::Describe() {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm local, cross;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(
      MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
      "MPI_Comm_split_type"));
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  KERASHVD_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split(comm_, local_rank_, rank_, &cross), "MPI_Comm_split"));
  MPI_Comm_rank(cross, &cross_rank_);
  MPI_Comm_size(cross, &cross_size_);
  MPI_Comm_free(&cross);
  // Also answers is_homogeneous(); keeps the node's communicator where there are 2+ nodes.
  return MpiNodes::Create(comm_, local, &nodes_, &homogeneous_, &node_of_);
}

MpiContext::~MpiContext() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized && !mpi_broken) MPI_Comm_free(&comm_);
}

}  // namespace kerashvd
