// KerashvdAllreduce and KerashvdGroupedAllreduce.
#include "kernels.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("KerashvdAllreduce")
    .Attr(TypeAttr(true))
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensor: T")
    .Input(kThreadInput)
    .Output("reduced: T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("Reduces a tensor across all ranks; every rank receives the result.");

REGISTER_OP("KerashvdGroupedAllreduce")
    .Attr(TypeAttr(true))
    .Attr("N: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensors: N * T")
    .Input(kThreadInput)
    .Output("reduced: N * T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Reduces a list of tensors as one unit, fused into one collective.");

REGISTER_KERNEL_BUILDER(Name("KerashvdAllreduce").Device(tfw::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedAllreduce").Device(tfw::DEVICE_CPU), AllreduceKernel);

}  // namespace tf
}  // namespace kerashvd
