// GpuKernel<K>: the kernel class K of a kerashvd op, run on a TensorFlow GPU device. Only a
// build with a GPU backend (KERASHVD_WITH_NCCL) compiles this folder; see README.md.
//
// K does everything it does on the CPU (attrs, validation, output allocation, Finish); only
// BindDevice differs: the entry names the GPU and waits for TF's stream (BindToTfStream).
#pragma once

#include "../kernels.h"

namespace kerashvd {
namespace tf {

// Binds `entry`, prepared by a kernel running on a TF GPU device, to that device:
//  - request.device becomes the CUDA ordinal of the GPU whose stream TF gave this op;
//  - wait_inputs blocks until TF's stream has reached the point where this op was called
//    (an event recorded now), so the inputs and any outputs allocated so far are complete;
//  - allocate (outputs of unknown shape, allocated later on the engine thread) waits the same
//    way after each allocation, because TF's allocator may hand back memory that kernels
//    still queued on its stream are using.
// When TF placed the op's data tensors in host memory the entry stays a host entry.
absl::Status BindToTfStream(tfw::OpKernelContext* context, TensorEntry* entry);

template <class Kernel>
class GpuKernel : public Kernel {
 public:
  explicit GpuKernel(tfw::OpKernelConstruction* context) : Kernel(context) {}

 protected:
  absl::Status BindDevice(tfw::OpKernelContext* context, TensorEntry* entry) override {
    return BindToTfStream(context, entry);
  }
};

}  // namespace tf
}  // namespace kerashvd
