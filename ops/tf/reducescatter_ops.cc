// KerashvdReducescatter and KerashvdGroupedReducescatter: reduce across ranks, then rank r
// keeps its slice of the first dimension (the first rows % size ranks get one extra row).
#include "kernels.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status ScatteredShape(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) {
    ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(i), 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

REGISTER_OP("KerashvdReducescatter")
    .Attr(TypeAttr(true))
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensor: T")
    .Input(kThreadInput)
    .Output("scattered: T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn(ScatteredShape)
    .Doc("Reduces across ranks and scatters slices of the first dimension.");

REGISTER_OP("KerashvdGroupedReducescatter")
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
    .Output("scattered: N * T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn(ScatteredShape)
    .Doc("Reducescatter of a list of tensors as one unit.");

REGISTER_KERNEL_BUILDER(Name("KerashvdReducescatter").Device(tfw::DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedReducescatter").Device(tfw::DEVICE_CPU),
                        ReducescatterKernel);

}  // namespace tf
}  // namespace kerashvd
