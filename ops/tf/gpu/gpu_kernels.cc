// DEVICE_GPU registrations of every kerashvd op (compiled only with KERASHVD_WITH_NCCL).
// Tensors to communicate stay in GPU memory; arguments that steer host decisions are in host
// memory (HostMemory): alltoall's splits and received_splits, join's last_joined_rank, the
// collectives' thread input (ops/tf/adapter.h).
// Join and barrier carry no tensor data, so they run their CPU kernel class unchanged: being
// registered here only lets TF place them beside GPU ops without soft placement.
#include "gpu_kernel.h"

namespace kerashvd {
namespace tf {

using ::tensorflow::DEVICE_GPU;

REGISTER_KERNEL_BUILDER(Name("KerashvdAllreduce").Device(DEVICE_GPU).HostMemory("thread"), GpuKernel<AllreduceKernel>);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedAllreduce").Device(DEVICE_GPU).HostMemory("thread"),
                        GpuKernel<AllreduceKernel>);

REGISTER_KERNEL_BUILDER(Name("KerashvdAllgather").Device(DEVICE_GPU).HostMemory("thread"), GpuKernel<AllgatherKernel>);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedAllgather").Device(DEVICE_GPU).HostMemory("thread"),
                        GpuKernel<AllgatherKernel>);

REGISTER_KERNEL_BUILDER(Name("KerashvdBroadcast").Device(DEVICE_GPU).HostMemory("thread"), GpuKernel<BroadcastKernel>);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedBroadcast").Device(DEVICE_GPU).HostMemory("thread"),
                        GpuKernel<BroadcastKernel>);

REGISTER_KERNEL_BUILDER(Name("KerashvdAlltoall")
                            .Device(DEVICE_GPU)
                            .HostMemory("splits")
                            .HostMemory("thread")
                            .HostMemory("received_splits"),
                        GpuKernel<AlltoallKernel>);

REGISTER_KERNEL_BUILDER(Name("KerashvdReducescatter").Device(DEVICE_GPU).HostMemory("thread"),
                        GpuKernel<ReducescatterKernel>);
REGISTER_KERNEL_BUILDER(Name("KerashvdGroupedReducescatter").Device(DEVICE_GPU).HostMemory("thread"),
                        GpuKernel<ReducescatterKernel>);

REGISTER_KERNEL_BUILDER(Name("KerashvdJoin").Device(DEVICE_GPU).HostMemory("last_joined_rank"),
                        JoinKernel);
REGISTER_KERNEL_BUILDER(Name("KerashvdBarrier").Device(DEVICE_GPU).HostMemory("thread"), BarrierKernel);

}  // namespace tf
}  // namespace kerashvd
