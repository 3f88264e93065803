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
    .Attr("what: {'rank', 'size', 'local_rank', 'local_size', 'cross_rank', 'cross_size'}")
    .Output("value: int32")
    .SetIsStateful()  // the value belongs to the running engine: never constant-folded
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This process's place in the job, read from the running engine.");

class TopologyKernel : public tfw::OpKernel {
 public:
  explicit TopologyKernel(tfw::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("what", &what_));
  }

  void Compute(tfw::OpKernelContext* context) override {
    std::shared_ptr<Engine> engine;
    OP_REQUIRES_OK(context, ToAbsl(RequireEngine(&engine)));
    const MpiContext& mpi = engine->mpi();
    int value = 0;
    if (what_ == "rank") value = mpi.rank();
    else if (what_ == "size") value = mpi.size();
    else if (what_ == "local_rank") value = mpi.local_rank();
    else if (what_ == "local_size") value = mpi.local_size();
    else if (what_ == "cross_rank") value = mpi.cross_rank();
    else value = mpi.cross_size();
    tfw::Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tfw::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  std::string what_;
};

REGISTER_KERNEL_BUILDER(Name("KerashvdTopology").Device(tfw::DEVICE_CPU), TopologyKernel);

}  // namespace tf
}  // namespace kerashvd
