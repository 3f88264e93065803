// KerashvdAllgather and KerashvdGroupedAllgather: concatenation along the first dimension,
// which may differ between ranks.
#include "kernels.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status UnknownFirstDim(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) {
    ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(i), 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

REGISTER_OP("KerashvdAllgather")
    .Attr(TypeAttr(false))
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensor: T")
    .Input(kThreadInput)
    .Output("gathered: T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn(UnknownFirstDim)
    .Doc("Concatenates every rank's tensor along the first dimension, in rank order.");

REGISTER_OP("KerashvdGroupedAllgather")
    .Attr(TypeAttr(false))
    .Attr("N: int >= 1")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensors: N * T")
    .Input(kThreadInput)
    .Output("gathered: N * T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn(UnknownFirstDim)
    .Doc("Allgather of a list of tensors as one unit.");

REGISTER_KERNEL_BUILDER(Name("KerashvdAllgather").Device(tfw::DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedAllgather").Device(tfw::DEVICE_CPU), AllgatherKernel);

}  // namespace tf
}  // namespace kerashvd
