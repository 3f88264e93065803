#include "carry.h"

#include <algorithm>

#include "backend/shm/pair_reduce.h"

namespace kerashvd {
namespace {

ReduceOp PayloadOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

uint64_t Header(DataType dtype, ReduceOp op) {
  return kCarryMagic << 16 | uint64_t{static_cast<uint8_t>(dtype)} << 8 |
         uint64_t{static_cast<uint8_t>(op)};
}

}  // namespace

bool Carriable(const Request& r, int64_t limit) {
  if (r.op_type != OpType::kAllreduce || r.shapes.size() != 1 || r.device != -1 ||
      r.process_set != 0 || !r.error.empty() || r.in_flight != 0)
    return false;
  const ReduceOp op = PayloadOp(r.reduce_op);
  if (!IsReducible(r.dtype) || WireType(r.dtype, op) != r.dtype || !PairReducible(r.dtype, op))
    return false;
  const int64_t bytes = NumElements(r.shapes[0]) * static_cast<int64_t>(DataTypeSize(r.dtype));
  return bytes > 0 && bytes <= std::min(limit, kCarryMaxBytes);
}

bool OrderMatters(const Request& r, int world) {
  const ReduceOp op = PayloadOp(r.reduce_op);
  return world >= 3 && IsFloating(r.dtype) && (op == ReduceOp::kSum || op == ReduceOp::kProduct);
}

CarryLayout CarryLayout::Of(const Request& request, int and_words) {
  CarryLayout layout;
  layout.and_words = and_words;
  layout.count = NumElements(request.shapes[0]);
  layout.dtype = request.dtype;
  layout.op = request.reduce_op;
  return layout;
}

int CarryLayout::total_words() const {
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  return payload_offset() + static_cast<int>((bytes + 7) / 8);
}

std::vector<uint64_t> CarryLayout::NewMessage() const {
  std::vector<uint64_t> message(total_words(), 0);
  message[0] = Header(dtype, op);
  message[1] = static_cast<uint64_t>(count) << 32 | static_cast<uint32_t>(and_words);
  return message;
}

bool CarryLayout::HeaderIntact(const uint64_t* message) const {
  return message[0] == Header(dtype, op) &&
         message[1] == (static_cast<uint64_t>(count) << 32 | static_cast<uint32_t>(and_words));
}

void CombineCarry(const uint64_t* in, uint64_t* inout) {
  if (in[0] != inout[0] || in[1] != inout[1] || (inout[0] >> 16) != kCarryMagic) {
    inout[0] = 0;  // the ranks disagree on the layout: HeaderIntact fails everywhere
    return;
  }
  const auto dtype = static_cast<DataType>((inout[0] >> 8) & 0xff);
  const auto op = static_cast<ReduceOp>(inout[0] & 0xff);
  const int and_words = static_cast<int>(inout[1] & 0xffffffff);
  const int64_t count = static_cast<int64_t>(inout[1] >> 32);
  for (int i = 2; i < 2 + and_words; ++i) inout[i] &= in[i];
  PairReduce(in + 2 + and_words, inout + 2 + and_words, inout + 2 + and_words, nullptr, count,
             dtype, PayloadOp(op));
}

int32_t CarryPredictor::Predict() const {
  if (last_ < 0) return -1;
  auto it = next_.find(last_);
  return it == next_.end() ? -1 : it->second;
}

void CarryPredictor::Observe(int32_t slot) {
  if (slot >= 0 && last_ >= 0) next_[last_] = slot;
  last_ = slot;
}

void CarryPredictor::Reset() {
  last_ = -1;
  next_.clear();
}

}  // namespace kerashvd
