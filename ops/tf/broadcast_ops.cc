// KerashvdBroadcast and KerashvdGroupedBroadcast: root_rank's values to every rank.
#include "adapter.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("KerashvdBroadcast")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}")
    .Attr("root_rank: int")
    .Attr("tensor_name: string")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("Every rank receives root_rank's tensor.");

REGISTER_OP("KerashvdGroupedBroadcast")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}")
    .Attr("N: int >= 1")
    .Attr("root_rank: int")
    .Attr("tensor_name: string")
    .Input("tensors: N * T")
    .Output("broadcast: N * T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Broadcast of a list of tensors as one unit.");

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kBroadcast) {}

 protected:
  absl::Status Validate(tfw::OpKernelContext* context, TensorEntry* entry) override {
    std::shared_ptr<Engine> engine = CurrentEngine();
    int size = engine ? engine->mpi().size() : 1;
    if (root_rank_ < 0 || root_rank_ >= size)
      return absl::InvalidArgumentError("broadcast of '" + tensor_name_ + "': root_rank must be in [0, " +
                                        std::to_string(size) + "); received root_rank=" +
                                        std::to_string(root_rank_));
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("KerashvdBroadcast").Device(tfw::DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedBroadcast").Device(tfw::DEVICE_CPU), BroadcastKernel);

}  // namespace tf
}  // namespace kerashvd
