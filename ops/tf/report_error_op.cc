// KerashvdReportError: this rank cannot run the collective `tensor_name` (its own arguments
// were found wrong before any kernel ran, e.g. by Python) and tells the other ranks, which may
// already wait in it. It submits a failed request under that name (ops/core/controller.h) and
// fails, like every rank's collective of that name, with an error naming this rank and
// `message`.
#include "kernels.h"
#include "tensorflow/core/framework/common_shape_fns.h"

namespace kerashvd {
namespace tf {

REGISTER_OP("KerashvdReportError")
    .Input("message: string")
    .Attr("tensor_name: string")
    .Attr("collective: int")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Fails the collective `tensor_name` on every rank with `message` from this rank.");

class ReportErrorKernel : public CollectiveKernel {
 public:
  explicit ReportErrorKernel(tfw::OpKernelConstruction* c)
      : CollectiveKernel(c, OpType::kAllreduce) {
    int collective;
    OP_REQUIRES_OK(c, c->GetAttr("collective", &collective));
    const OpTypeInfo* row = FindOpType(collective);
    OP_REQUIRES(c, row != nullptr && row->reportable,
                absl::InvalidArgumentError("collective must be the number of one of " +
                                           ReportableOpTypeNames() + " (kerashvd._core.OP_TYPES)"
                                           "; received " + std::to_string(collective)));
    op_type_ = static_cast<OpType>(collective);
  }

 protected:
  int NumDataInputs(tfw::OpKernelContext*) const override { return 0; }
  // The reported message becomes the failed request's (CollectiveKernel::ComputeAsync).
  absl::Status Validate(tfw::OpKernelContext* context, const ProcessSetView&,
                        TensorEntry*) override {
    const tfw::Tensor& message = context->input(0);
    if (message.NumElements() != 1)
      return absl::InvalidArgumentError("KerashvdReportError needs one message");
    return absl::InvalidArgumentError(std::string(message.flat<tfw::tstring>()(0)));
  }
  absl::Status PrepareOutputs(tfw::OpKernelContext*, TensorEntry*) override {
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("KerashvdReportError").Device(tfw::DEVICE_CPU),
                        ReportErrorKernel);

}  // namespace tf
}  // namespace kerashvd
