// KerashvdBroadcast and KerashvdGroupedBroadcast: root_rank's values to every rank.
#include "kernels.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("KerashvdBroadcast")
    .Attr(TypeAttr(false))
    .Attr("root_rank: int")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensor: T")
    .Input(kThreadInput)
    .Output("broadcast: T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("Every rank receives root_rank's tensor.");

REGISTER_OP("KerashvdGroupedBroadcast")
    .Attr(TypeAttr(false))
    .Attr("N: int >= 1")
    .Attr("root_rank: int")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input("tensors: N * T")
    .Input(kThreadInput)
    .Output("broadcast: N * T")
    .SetIsStateful()  // see kernels.h
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Broadcast of a list of tensors as one unit.");

REGISTER_KERNEL_BUILDER(Name("KerashvdBroadcast").Device(tfw::DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedBroadcast").Device(tfw::DEVICE_CPU), BroadcastKernel);

}  // namespace tf
}  // namespace kerashvd
