// BindToTfStream (gpu_kernel.h): how a GPU entry waits for the TensorFlow stream that
// produced its tensors.
//
// TF runs a GPU op's kernels on the op's stream and calls ComputeAsync as soon as they are
// *queued*; the engine reads the inputs later, on its own thread and its own CUDA stream. So
// ComputeAsync records an event on TF's stream, and the engine's wait_inputs blocks its thread
// on that event just before the collective reads the inputs. After the collective the engine
// calls done only once the GPU work has completed, so TF's consumers need no further ordering.
//
// Everything goes through TF's own StreamExecutor interface (virtual calls into the TF
// runtime that owns the stream): the event is a CUDA event TF creates, records and
// synchronizes on the stream's own device and context. This library needs no CUDA headers or
// runtime of its own, and no TF handle ever crosses into the engine's statically linked CUDA
// runtime: the two meet only through device memory, in the primary context of one GPU.
#include "gpu_kernel.h"

#include <memory>
#include <string>
#include <utility>

#include "xla/stream_executor/event.h"
#include "xla/stream_executor/platform.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace kerashvd {
namespace tf {
namespace {

namespace se = ::stream_executor;

Status FromAbsl(const absl::Status& status, const std::string& what) {
  if (status.ok()) return Status::Ok();
  return Status::Internal(what + ": " + std::string(status.message()));
}

// An event recorded on `stream` now: complete once the stream has run everything queued on
// it so far.
absl::StatusOr<std::shared_ptr<se::Event>> RecordOn(se::Stream* stream) {
  absl::StatusOr<std::unique_ptr<se::Event>> event = stream->parent()->CreateEvent();
  if (!event.ok()) return event.status();
  std::shared_ptr<se::Event> shared(std::move(*event));
  absl::Status recorded = stream->RecordEvent(shared.get());
  if (!recorded.ok()) return recorded;
  return shared;
}

// Whether the op's data tensors (the first n inputs and outputs) are in device memory. TF
// gives a GPU kernel host memory only for HostMemory arguments, which the data tensors are
// not, or where a graph pass forces it (_input_hostmem); then the entry runs from the host.
absl::Status DataOnDevice(tfw::OpKernelContext* context, int n, bool* on_device) {
  int host = 0;
  for (int i = 0; i < n; ++i) {
    host += context->input_memory_type(i) == tfw::HOST_MEMORY;
    host += context->output_memory_type(i) == tfw::HOST_MEMORY;
  }
  if (host != 0 && host != 2 * n)
    return absl::InvalidArgumentError(
        "kerashvd op '" + context->op_kernel().name() + "' on " + context->device()->name() +
        " has some data tensors in host memory and some in GPU memory; it needs all of them in "
        "one place. Place the op on the CPU (tf.device('/CPU:0')) to work around this.");
  *on_device = n > 0 && host == 0;
  return absl::OkStatus();
}

}  // namespace

absl::Status BindToTfStream(tfw::OpKernelContext* context, TensorEntry* entry) {
  bool on_device = false;
  TF_RETURN_IF_ERROR(DataOnDevice(context, static_cast<int>(entry->inputs.size()), &on_device));
  if (!on_device) return absl::OkStatus();

  tfw::DeviceContext* device_context = context->op_device_context();
  se::Stream* stream = device_context ? device_context->stream() : nullptr;
  if (stream == nullptr)
    return absl::InternalError("kerashvd op '" + context->op_kernel().name() + "' on " +
                               context->device()->name() + " has no GPU stream");
  se::StreamExecutor* executor = stream->parent();
  if (executor->GetPlatform()->Name() != "CUDA")
    return absl::UnimplementedError(
        "kerashvd's GPU kernels need a CUDA device; " + context->device()->name() + " is a " +
        executor->GetPlatform()->Name() + " device. Place the op on the CPU.");
  // The stream executor's ordinal is the CUDA runtime's device number within
  // CUDA_VISIBLE_DEVICES (TF's "platform device id"), not TF's /GPU:N index, which
  // tf.config.set_visible_devices may renumber.
  entry->request.device = executor->device_ordinal();
  if (entry->request.device < 0)
    return absl::InternalError("TF's stream for " + context->device()->name() +
                               " does not say which CUDA device it is on");

  absl::StatusOr<std::shared_ptr<se::Event>> ready = RecordOn(stream);
  if (!ready.ok()) return ready.status();
  entry->wait_inputs = [event = *std::move(ready)]() {
    return FromAbsl(event->Synchronize(), "waiting for TensorFlow's stream to produce the inputs");
  };

  if (entry->allocate) {
    entry->allocate = [allocate = std::move(entry->allocate), stream](
                          size_t index, const Shape& shape, void** data) -> Status {
      KERASHVD_RETURN_IF_ERROR(allocate(index, shape, data));
      absl::StatusOr<std::shared_ptr<se::Event>> free = RecordOn(stream);
      if (!free.ok()) return FromAbsl(free.status(), "recording an event on TensorFlow's stream");
      return FromAbsl((*free)->Synchronize(), "waiting for TensorFlow's stream to release memory");
    };
  }
  return absl::OkStatus();
}

}  // namespace tf
}  // namespace kerashvd
