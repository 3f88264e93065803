// KerashvdJoin and KerashvdBarrier: collectives that carry no data.
#include "kernels.h"
#include "tensorflow/core/framework/common_shape_fns.h"

namespace kerashvd {
namespace tf {

REGISTER_OP("KerashvdJoin")
    .Attr("tensor_name: string")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Waits until every rank has joined; joined ranks contribute the identity of the op "
         "to allreduces, and other collectives fail while a rank has joined.");

REGISTER_OP("KerashvdBarrier")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr(kThreadTagsAttr)  // see kThreadInput
    .Input(kThreadInput)
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Waits until every rank has reached the barrier.");

REGISTER_KERNEL_BUILDER(Name("KerashvdJoin").Device(tfw::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdBarrier").Device(tfw::DEVICE_CPU), BarrierKernel);

}  // namespace tf
}  // namespace kerashvd
