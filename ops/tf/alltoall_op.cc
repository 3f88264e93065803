// KerashvdAlltoall: rank r sends splits[q] rows of its tensor to each rank q and receives, in
// rank order, the rows every rank sent to it; also returns how many rows came from each rank.
#include "kernels.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("KerashvdAlltoall")
    .Attr(TypeAttr(false))
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Attr("Tsplits: {int32, int64, float, double} = DT_INT64")
    .Input("tensor: T")
    .Input("splits: Tsplits")
    .Input(kThreadInput)
    .Output("received: T")
    .Output("received_splits: int64")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Exchanges slices of the first dimension between all ranks.");

REGISTER_KERNEL_BUILDER(Name("KerashvdAlltoall").Device(tfw::DEVICE_CPU), AlltoallKernel);

}  // namespace tf
}  // namespace kerashvd
