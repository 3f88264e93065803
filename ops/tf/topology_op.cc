// KerashvdTopology: this process's rank, size, local rank, ... as an int32 scalar read when the
// op runs, not when a function is traced (Horovod's rank_op, size_op and friends). A graph
// or SavedModel that uses it therefore sees the world it runs in.
#include "adapter.h"
#include "../core/runtime.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace kerashvd {
namespace tf {

REGISTER_OP("KerashvdTopology")
    .Attr("what: {'rank', 'size', 'local_rank', 'local_size', 'cross_rank', 'cross_size', "
          "'process_set_included'}")
    .Attr("process_set_id: int = 0")
    .Output("value: int32")
    .SetIsStateful()  // the value belongs to the running engine: never constant-folded
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This process's place in the job, read from the running engine. With a process set: "
         "'rank' and 'size' count within the set (rank -1 outside it), and "
         "'process_set_included' is 1 for its members and 0 otherwise.");

class TopologyKernel : public tfw::OpKernel {
 public:
  explicit TopologyKernel(tfw::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("what", &what_));
    OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &process_set_));
  }

  void Compute(tfw::OpKernelContext* context) override {
    std::shared_ptr<Engine> engine;
    OP_REQUIRES_OK(context, ToAbsl(RequireEngineForQuery(&engine)));
    const Topology& topo = engine->topology();
    ProcessSetView set;
    OP_REQUIRES_OK(context, ToAbsl(engine->process_sets().View(process_set_, &set)));
    int value = 0;
    if (what_ == "process_set_included") value = set.rank >= 0 ? 1 : 0;
    else if (what_ == "rank" && process_set_ != 0) value = set.rank;
    else if (what_ == "size" && process_set_ != 0) value = set.size;
    else if (what_ == "rank") value = topo.rank;
    else if (what_ == "size") value = topo.size;
    else if (what_ == "local_rank") value = topo.local_rank;
    else if (what_ == "local_size") value = topo.local_size;
    else if (what_ == "cross_rank") value = topo.cross_rank;
    else value = topo.cross_size;
    tfw::Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tfw::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  std::string what_;
  int process_set_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("KerashvdTopology").Device(tfw::DEVICE_CPU), TopologyKernel);

}  // namespace tf
}  // namespace kerashvd
