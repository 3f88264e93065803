#include "adapter.h"

namespace kerashvd {
namespace tf {

absl::Status ToAbsl(const Status& status) {
  switch (status.code()) {
    case Status::Code::kOk: return absl::OkStatus();
    case Status::Code::kInvalidArgument: return absl::InvalidArgumentError(status.message());
    case Status::Code::kFailedPrecondition: return absl::FailedPreconditionError(status.message());
    // Ranks that disagree about a collective: FailedPrecondition, as in Horovod, whose users
    // catch tf.errors.FailedPreconditionError for it.
    case Status::Code::kMismatch: return absl::FailedPreconditionError(status.message());
    case Status::Code::kAborted: return absl::AbortedError(status.message());
    case Status::Code::kUnimplemented: return absl::UnimplementedError(status.message());
    case Status::Code::kInternal: return absl::InternalError(status.message());
  }
  return absl::UnknownError(status.message());
}

namespace {

// The TensorFlow type of each engine DataType.
struct TfType {
  DataType dtype;
  tfw::DataType tf;
};
constexpr TfType kTfTypes[] = {
    {DataType::kUint8, tfw::DT_UINT8},     {DataType::kInt8, tfw::DT_INT8},
    {DataType::kUint16, tfw::DT_UINT16},   {DataType::kInt16, tfw::DT_INT16},
    {DataType::kInt32, tfw::DT_INT32},     {DataType::kInt64, tfw::DT_INT64},
    {DataType::kFloat16, tfw::DT_HALF},    {DataType::kBfloat16, tfw::DT_BFLOAT16},
    {DataType::kFloat32, tfw::DT_FLOAT},   {DataType::kFloat64, tfw::DT_DOUBLE},
    {DataType::kBool, tfw::DT_BOOL},
};

}  // namespace

bool FromTfDtype(tfw::DataType dtype, DataType* out) {
  for (const TfType& t : kTfTypes) {
    if (t.tf == dtype) {
      *out = t.dtype;
      return true;
    }
  }
  return false;
}

std::string TypeAttr(bool reducible_only) {
  std::string types;
  for (const DataTypeInfo& row : DataTypes()) {
    if (reducible_only && !row.reducible) continue;
    for (const TfType& t : kTfTypes)
      if (t.dtype == row.dtype) types += (types.empty() ? "" : ", ") + tfw::DataTypeString(t.tf);
  }
  return "T: {" + types + "}";
}

Shape FromTfShape(const tfw::TensorShape& shape) {
  Shape out;
  for (int i = 0; i < shape.dims(); ++i) out.push_back(shape.dim_size(i));
  return out;
}

tfw::TensorShape ToTfShape(const Shape& shape) {
  tfw::TensorShape out;
  for (int64_t d : shape) out.AddDim(d);
  return out;
}

CollectiveKernel::CollectiveKernel(tfw::OpKernelConstruction* context, OpType op_type)
    : AsyncOpKernel(context), op_type_(op_type) {
  OP_REQUIRES_OK(context, context->GetAttr("tensor_name", &tensor_name_));
  if (context->HasAttr("reduce_op")) {
    int op;
    OP_REQUIRES_OK(context, context->GetAttr("reduce_op", &op));
    const ReduceOpInfo* row = FindReduceOp(op);
    OP_REQUIRES(context, row != nullptr && row->implemented,
                absl::InvalidArgumentError("reduce_op must be one of " + ReduceOpNames(false) +
                                           "; received " +
                                           (row ? std::string(row->name) : std::to_string(op))));
    reduce_op_ = static_cast<ReduceOp>(op);
  }
  if (context->HasAttr("prescale_factor"))
    OP_REQUIRES_OK(context, context->GetAttr("prescale_factor", &prescale_));
  if (context->HasAttr("postscale_factor"))
    OP_REQUIRES_OK(context, context->GetAttr("postscale_factor", &postscale_));
  if (context->HasAttr("root_rank"))
    OP_REQUIRES_OK(context, context->GetAttr("root_rank", &root_rank_));
  if (context->HasAttr("process_set_id"))
    OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &process_set_));
  if (context->HasAttr("thread_tags")) {
    OP_REQUIRES_OK(context, context->GetAttr("thread_tags", &thread_tags_));
    OP_REQUIRES(context, thread_tags_ <= 1,
                absl::InvalidArgumentError("thread_tags must be 0 or 1; received " +
                                           std::to_string(thread_tags_)));
  }
}

absl::Status CollectiveKernel::PrepareOutputs(tfw::OpKernelContext* context, TensorEntry* entry) {
  return OutputsLikeInputs(context, entry);
}

void CollectiveKernel::ComputeAsync(tfw::OpKernelContext* context, DoneCallback done) {
  std::shared_ptr<Engine> engine;
  OP_REQUIRES_OK_ASYNC(context, ToAbsl(RequireEngine(&engine)), done);

  // The registry's membership check, before anything is allocated (Engine::Submit asks it too).
  if (process_set_ != 0)
    OP_REQUIRES_OK_ASYNC(
        context, ToAbsl(engine->process_sets().CheckCaller(process_set_, tensor_name_)), done);
  ProcessSetView set;
  OP_REQUIRES_OK_ASYNC(context, ToAbsl(engine->process_sets().View(process_set_, &set)), done);
  TensorEntry entry;
  entry.process_set = process_set_;
  Request& request = entry.request;
  request.name = tensor_name_;
  if (thread_tags_ == 1) {
    const tfw::Tensor& thread = context->input(context->num_inputs() - 1);
    OP_REQUIRES_ASYNC(context, thread.NumElements() == 1,
                      absl::InvalidArgumentError("the thread input of '" + tensor_name_ +
                                                 "' must be one string"),
                      done);
    request.name += std::string(thread.flat<tfw::tstring>()(0));
  }
  request.op_type = op_type_;
  request.reduce_op = reduce_op_;
  request.prescale = prescale_;
  request.postscale = postscale_;
  request.root_rank = root_rank_;
  request.device = -1;
  // A problem with this rank's own inputs or arguments: the other ranks may already wait in
  // this collective, so it is submitted anyway, as a failed request, and fails on every rank
  // (ops/core/controller.h).
  absl::Status local = Prepare(context, set, &entry);
  if (!local.ok()) MarkFailed(local, &entry);

  entry.done = [this, context, done](const Status& status, const CollectiveResult& result) {
    absl::Status s = ToAbsl(status);
    if (s.ok()) s = Finish(context, result);
    context->SetStatus(s);
    done();
  };
  Status submitted = engine->Submit(std::move(entry));
  OP_REQUIRES_OK_ASYNC(context, ToAbsl(submitted), done);
}

absl::Status CollectiveKernel::Prepare(tfw::OpKernelContext* context, const ProcessSetView& set,
                                       TensorEntry* entry) {
  Request& request = entry->request;
  const int n = NumDataInputs(context);
  for (int i = 0; i < n; ++i) {
    const tfw::Tensor& t = context->input(i);
    if (!FromTfDtype(t.dtype(), &request.dtype))
      return absl::InvalidArgumentError("kerashvd does not support dtype " +
                                        tfw::DataTypeString(t.dtype()));
    request.shapes.push_back(FromTfShape(t.shape()));
    entry->inputs.push_back(t.tensor_data().data());
  }
  TF_RETURN_IF_ERROR(Validate(context, set, entry));
  TF_RETURN_IF_ERROR(PrepareOutputs(context, entry));
  return BindDevice(context, entry);
}

void MarkFailed(const absl::Status& why, TensorEntry* entry) {
  Request& request = entry->request;
  request.error = std::string(why.message());
  request.shapes.clear();
  request.device = -1;
  entry->inputs.clear();
  entry->outputs.clear();
  entry->splits.clear();
  entry->allocate = nullptr;
  entry->wait_inputs = nullptr;
}

absl::Status OutputsLikeInputs(tfw::OpKernelContext* context, TensorEntry* entry) {
  for (size_t i = 0; i < entry->inputs.size(); ++i) {
    tfw::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(context->forward_input_or_allocate_output(
        {static_cast<int>(i)}, static_cast<int>(i), context->input(i).shape(), &out));
    entry->outputs.push_back(const_cast<char*>(out->tensor_data().data()));
  }
  return absl::OkStatus();
}

void OutputsAllocatedLater(tfw::OpKernelContext* context, TensorEntry* entry) {
  entry->outputs.assign(entry->inputs.size(), nullptr);
  entry->allocate = [context](size_t i, const Shape& shape, void** data) {
    tfw::Tensor* out = nullptr;
    absl::Status s = context->allocate_output(static_cast<int>(i), ToTfShape(shape), &out);
    if (!s.ok()) return Status::Internal("allocating output: " + std::string(s.message()));
    *data = const_cast<char*>(out->tensor_data().data());
    return Status::Ok();
  };
}

}  // namespace tf
}  // namespace kerashvd
