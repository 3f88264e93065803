// The one border between TensorFlow and the engine: dtype conversion, Status conversion, and
// CollectiveKernel, the AsyncOpKernel every kerashvd op derives from.
#pragma once

#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#include "../core/runtime.h"

namespace kerashvd {
namespace tf {

namespace tfw = ::tensorflow;

absl::Status ToAbsl(const Status& status);
bool FromTfDtype(tfw::DataType dtype, DataType* out);
// The type attr of the collectives' REGISTER_OP, "T: {uint8, int8, ...}", from DataTypes():
// with `reducible_only`, the types allreduce and reducescatter take.
std::string TypeAttr(bool reducible_only);
Shape FromTfShape(const tfw::TensorShape& shape);
tfw::TensorShape ToTfShape(const Shape& shape);

// The calling thread of a traced function, at run time. A tf.function is traced once and may
// then be called from several threads; a collective in it that has no name= gets its key from
// the trace (kerashvd/collectives/_names.py), the same for every calling thread. Such an op has
// one extra input, `thread`: a string that Python computes at each call of the function, in
// the calling thread ("" for the main thread, "[name]" for a thread named `name`), which the
// kernel appends to the key. Calls from different threads then pair across ranks by thread,
// whatever order each rank runs them in. Ops with an explicit name have no such input
// (thread_tags = 0), so graphs built without it keep their meaning.
inline constexpr char kThreadInput[] = "thread: thread_tags * string";
inline constexpr char kThreadTagsAttr[] = "thread_tags: int >= 0 = 0";

// Handles every collective's common work: reads the attrs (tensor_name, reduce_op, prescale
// and postscale factors, root_rank and process_set_id where present), checks the inputs, lets
// the subclass prepare outputs, submits the entry and finishes the op when the engine calls
// back.
class CollectiveKernel : public tfw::AsyncOpKernel {
 public:
  CollectiveKernel(tfw::OpKernelConstruction* context, OpType op_type);
  void ComputeAsync(tfw::OpKernelContext* context, DoneCallback done) override;

 protected:
  // Fills entry->outputs (allocating outputs whose shape is known now) and entry->allocate.
  virtual absl::Status PrepareOutputs(tfw::OpKernelContext* context, TensorEntry* entry);
  // Called on the engine thread after a successful collective, before the op finishes.
  virtual absl::Status Finish(tfw::OpKernelContext* context, const CollectiveResult& result) {
    return absl::OkStatus();
  }
  // Number of leading inputs that are tensors to communicate (the rest are parameters and
  // the thread input).
  virtual int NumDataInputs(tfw::OpKernelContext* context) const {
    return context->num_inputs() - thread_tags_;
  }
  // `set`: the process set the collective runs in, with this rank a member.
  virtual absl::Status Validate(tfw::OpKernelContext* context, const ProcessSetView& set,
                                TensorEntry* entry) {
    return absl::OkStatus();
  }
  // Called after PrepareOutputs: says where the entry's buffers live and, for a device, how the
  // engine waits for them. Here host memory (request.device stays -1); the GPU kernels
  // (ops/tf/gpu, built only with a GPU backend) override it.
  virtual absl::Status BindDevice(tfw::OpKernelContext*, TensorEntry*) {
    return absl::OkStatus();
  }

  // Reads the data inputs into `entry`, validates them and prepares the outputs.
  absl::Status Prepare(tfw::OpKernelContext* context, const ProcessSetView& set,
                       TensorEntry* entry);

  OpType op_type_;
  std::string tensor_name_;
  ReduceOp reduce_op_ = ReduceOp::kSum;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int root_rank_ = 0;
  int process_set_ = 0;
  int thread_tags_ = 0;  // 1 when the op has the `thread` input (kThreadInput)
};

// Turns `entry` into a failed request (ops/core/controller.h) carrying `why`: no data, and the
// collective fails on every rank with a message naming this rank.
void MarkFailed(const absl::Status& why, TensorEntry* entry);
// Output i has the same shape as input i; reuses the input buffer when TF allows it.
absl::Status OutputsLikeInputs(tfw::OpKernelContext* context, TensorEntry* entry);
// Outputs are allocated by the engine once their shape is known.
void OutputsAllocatedLater(tfw::OpKernelContext* context, TensorEntry* entry);

}  // namespace tf
}  // namespace kerashvd
