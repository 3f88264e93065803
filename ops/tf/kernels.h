// The kernel class of every kerashvd op. The op files register them on the CPU; a build with
// a GPU backend also registers them on the GPU (ops/tf/gpu), which is why they live in a header.
//
// Every collective op is registered stateful: its result is not a function of its inputs
// alone, and TensorFlow treats ops that are not stateful as pure. It evaluates such an op once
// at graph optimization when its inputs are constants (an allgather of tf.shape(x) of a
// statically shaped x), and then serves the result of that first run for ever, on one rank
// while another rank runs it for real; it prunes one whose result is unused, on one rank only.
// Either way the ranks stop meeting. Being stateful, the collectives are also the kind of op
// tf.function orders in program order (automatic control dependencies): each would wait for
// the previous one to finish, one collective at a time. kerashvd registers them as
// asynchronous instead, as TensorFlow does its own collectives, so that they start as soon as
// their inputs are ready (kerashvd/_private_api.py, register_async_collectives).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "adapter.h"

namespace kerashvd {
namespace tf {
class AllreduceKernel : public CollectiveKernel {
 public:
  explicit AllreduceKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAllreduce) {}
};

class AllgatherKernel : public CollectiveKernel {
 public:
  explicit AllgatherKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAllgather) {}

 protected:
  absl::Status Validate(tfw::OpKernelContext*, const ProcessSetView&, TensorEntry* entry) override {
    for (const Shape& s : entry->request.shapes)
      if (s.empty())
        return absl::InvalidArgumentError(
            "allgather of '" + entry->request.name +
            "' needs a tensor of rank >= 1 (it concatenates along the first dimension); "
            "received a scalar. Reshape it to [1] first.");
    return absl::OkStatus();
  }
  absl::Status PrepareOutputs(tfw::OpKernelContext* context, TensorEntry* entry) override {
    OutputsAllocatedLater(context, entry);
    return absl::OkStatus();
  }
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kBroadcast) {}

 protected:
  // root_rank is a world rank (as in Horovod); the engine counts it within the process set.
  absl::Status Validate(tfw::OpKernelContext*, const ProcessSetView& set,
                        TensorEntry* entry) override {
    if (set.id == 0) {
      if (root_rank_ < 0 || root_rank_ >= set.size)
        return absl::InvalidArgumentError("broadcast of '" + entry->request.name +
                                          "': root_rank must be in [0, " +
                                          std::to_string(set.size) + "); received root_rank=" +
                                          std::to_string(root_rank_));
      return absl::OkStatus();
    }
    auto at = std::find(set.ranks.begin(), set.ranks.end(), root_rank_);
    if (at == set.ranks.end())
      return absl::InvalidArgumentError(
          "broadcast of '" + entry->request.name + "': root_rank=" + std::to_string(root_rank_) +
          " is not in process set " + std::to_string(set.id) + " (ranks " + RankList(set.ranks) +
          "); pass the world rank of one of its members.");
    entry->request.root_rank = static_cast<int>(at - set.ranks.begin());
    return absl::OkStatus();
  }
};

// Entry i of alltoall's splits, which may be any of the op's Tsplits types.
inline double SplitValue(const tfw::Tensor& splits, int i) {
  switch (splits.dtype()) {
    case tfw::DT_INT32: return splits.flat<int32_t>()(i);
    case tfw::DT_FLOAT: return splits.flat<float>()(i);
    case tfw::DT_DOUBLE: return splits.flat<double>()(i);
    default: return static_cast<double>(splits.flat<int64_t>()(i));
  }
}

inline std::string SplitsString(const std::vector<double>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return out.str() + "]";
}

class AlltoallKernel : public CollectiveKernel {
 public:
  explicit AlltoallKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAlltoall) {}

 protected:
  int NumDataInputs(tfw::OpKernelContext*) const override { return 1; }

  absl::Status Validate(tfw::OpKernelContext* context, const ProcessSetView& set,
                        TensorEntry* entry) override {
    const Shape& shape = entry->request.shapes[0];
    if (shape.empty())
      return absl::InvalidArgumentError("alltoall of '" + entry->request.name +
                                        "' needs a tensor of rank >= 1; received a scalar.");
    const int size = set.size;
    const tfw::Tensor& splits = context->input(1);
    const int64_t rows = shape[0];
    if (splits.NumElements() == 0) {
      if (rows % size != 0)
        return absl::InvalidArgumentError(
            "alltoall of '" + entry->request.name + "' without splits needs a first dimension divisible "
            "by the number of ranks (" + std::to_string(size) + "); received " +
            std::to_string(rows) + " rows. Pass splits= to send uneven parts.");
      entry->splits.assign(size, rows / size);
      return absl::OkStatus();
    }
    if (splits.dims() != 1 || splits.NumElements() != size)
      return absl::InvalidArgumentError(
          "alltoall of '" + entry->request.name + "': splits must be a vector with one entry per rank (" +
          std::to_string(size) + "); received shape " + splits.shape().DebugString());
    std::vector<double> values;  // exact for every integer a tensor's rows can count
    for (int i = 0; i < size; ++i) values.push_back(SplitValue(splits, i));
    int64_t total = 0;
    for (double v : values) {
      if (!(v == std::floor(v)) || std::fabs(v) > 9e15)
        return absl::InvalidArgumentError("alltoall of '" + entry->request.name +
                                          "': splits must be whole numbers; received " +
                                          SplitsString(values));
      if (v < 0)
        return absl::InvalidArgumentError("alltoall of '" + entry->request.name +
                                          "': splits must be >= 0; received " +
                                          SplitsString(values));
      entry->splits.push_back(static_cast<int64_t>(v));
      total += static_cast<int64_t>(v);
    }
    if (total != rows)
      return absl::InvalidArgumentError(
          "alltoall of '" + entry->request.name + "': splits sum to " + std::to_string(total) +
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

class ReducescatterKernel : public CollectiveKernel {
 public:
  explicit ReducescatterKernel(tfw::OpKernelConstruction* c)
      : CollectiveKernel(c, OpType::kReducescatter) {}

 protected:
  absl::Status Validate(tfw::OpKernelContext*, const ProcessSetView&, TensorEntry* entry) override {
    for (const Shape& s : entry->request.shapes)
      if (s.empty())
        return absl::InvalidArgumentError("reducescatter of '" + entry->request.name +
                                          "' needs a tensor of rank >= 1; received a scalar.");
    const ReduceOpInfo* op = FindReduceOp(static_cast<int>(reduce_op_));
    if (op == nullptr || !op->scatter)
      return absl::InvalidArgumentError("reducescatter supports the ops " + ReduceOpNames(true) +
                                        "; received " + ReduceOpName(reduce_op_));
    return absl::OkStatus();
  }
  absl::Status PrepareOutputs(tfw::OpKernelContext* context, TensorEntry* entry) override {
    OutputsAllocatedLater(context, entry);
    return absl::OkStatus();
  }
};

class JoinKernel : public CollectiveKernel {
 public:
  explicit JoinKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kJoin) {}

 protected:
  absl::Status PrepareOutputs(tfw::OpKernelContext*, TensorEntry*) override { return absl::OkStatus(); }
  absl::Status Finish(tfw::OpKernelContext* context, const CollectiveResult& result) override {
    tfw::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(context->allocate_output(0, tfw::TensorShape({}), &out));
    out->scalar<int32_t>()() = result.last_joined_rank;
    return absl::OkStatus();
  }
};

class BarrierKernel : public CollectiveKernel {
 public:
  explicit BarrierKernel(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kBarrier) {}

 protected:
  absl::Status PrepareOutputs(tfw::OpKernelContext*, TensorEntry*) override { return absl::OkStatus(); }
};

}  // namespace tf
}  // namespace kerashvd
