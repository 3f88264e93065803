// KerashvdJoin and KerashvdBarrier: collectives that carry no data.
#include "adapter.h"
#include "tensorflow/core/framework/common_shape_fns.h"

namespace kerashvd {
namespace tf {

REGISTER_OP("KerashvdJoin")
    .Attr("tensor_name: string")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Waits until every rank has joined; joined ranks contribute zeros to allreduces.");

REGISTER_OP("KerashvdBarrier")
    .Attr("tensor_name: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Waits until every rank has reached the barrier.");

class JoinKernel : public CollectiveKernel {
 public:
  explicit JoinKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kJoin) {}

 protected:
  absl::Status PrepareOutputs(tfw::OpKernelContext*, TensorEntry*) override { return absl::OkStatus(); }
  absl::Status Finish(tfw::OpKernelContext* context, const CollectiveResult& result) override {
    tfw::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(context->allocate_output(0, tfw::TensorShape({}), &out));
    out->scalar<int32_t>()() = result.last_joined_rank;
    return absl::OkStatus();
  }
};

class BarrierKernel : public CollectiveKernel {
 public:
  explicit BarrierKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kBarrier) {}

 protected:
  absl::Status PrepareOutputs(tfw::OpKernelContext*, TensorEntry*) override { return absl::OkStatus(); }
};

REGISTER_KERNEL_BUILDER(Name("KerashvdJoin").Device(tfw::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdBarrier").Device(tfw::DEVICE_CPU), BarrierKernel);

}  // namespace tf
}  // namespace kerashvd
