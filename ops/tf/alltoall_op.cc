// KerashvdAlltoall: rank r sends splits[q] rows of its tensor to each rank q and receives, in
// rank order, the rows every rank sent to it; also returns how many rows came from each rank.
#include "adapter.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("KerashvdAlltoall")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}")
    .Attr("tensor_name: string")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("received: T")
    .Output("received_splits: int64")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Exchanges slices of the first dimension between all ranks.");

class AlltoallKernel : public CollectiveKernel {
 public:
  explicit AlltoallKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAlltoall) {}

 protected:
  int NumDataInputs(tfw::OpKernelContext*) const override { return 1; }

  absl::Status Validate(tfw::OpKernelContext* context, TensorEntry* entry) override {
    const Shape& shape = entry->request.shapes[0];
    if (shape.empty())
      return absl::InvalidArgumentError("alltoall of '" + tensor_name_ +
                                        "' needs a tensor of rank >= 1; received a scalar.");
    std::shared_ptr<Engine> engine = CurrentEngine();
    const int size = engine ? engine->mpi().size() : 1;
    const tfw::Tensor& splits = context->input(1);
    const int64_t rows = shape[0];
    if (splits.NumElements() == 0) {
      if (rows % size != 0)
        return absl::InvalidArgumentError(
            "alltoall of '" + tensor_name_ + "' without splits needs a first dimension divisible "
            "by the number of ranks (" + std::to_string(size) + "); received " +
            std::to_string(rows) + " rows. Pass splits= to send uneven parts.");
      entry->splits.assign(size, rows / size);
      return absl::OkStatus();
    }
    if (splits.dims() != 1 || splits.NumElements() != size)
      return absl::InvalidArgumentError(
          "alltoall of '" + tensor_name_ + "': splits must be a vector with one entry per rank (" +
          std::to_string(size) + "); received shape " + splits.shape().DebugString());
    auto values = splits.flat<int64_t>();
    int64_t total = 0;
    for (int i = 0; i < size; ++i) {
      if (values(i) < 0)
        return absl::InvalidArgumentError("alltoall of '" + tensor_name_ + "': splits must be >= 0");
      entry->splits.push_back(values(i));
      total += values(i);
    }
    if (total != rows)
      return absl::InvalidArgumentError(
          "alltoall of '" + tensor_name_ + "': splits sum to " + std::to_string(total) +
          " but the tensor has " + std::to_string(rows) + " rows; they must be equal.");
    return absl::OkStatus();
  }

  absl::Status PrepareOutputs(tfw::OpKernelContext* context, TensorEntry* entry) override {
    OutputsAllocatedLater(context, entry);
    return absl::OkStatus();
  }

  absl::Status Finish(tfw::OpKernelContext* context, const CollectiveResult& result) override {
    tfw::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(context->allocate_output(
        1, tfw::TensorShape({static_cast<int64_t>(result.received_splits.size())}), &out));
    auto flat = out->flat<int64_t>();
    for (size_t i = 0; i < result.received_splits.size(); ++i) flat(i) = result.received_splits[i];
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("KerashvdAlltoall").Device(tfw::DEVICE_CPU), AlltoallKernel);

}  // namespace tf
}  // namespace kerashvd
