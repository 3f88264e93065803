#include "message.h"

#include <sstream>

#include "wire.h"

namespace kerashvd {
namespace {

void PutRequest(WireWriter& w, const Request& r) {
  w.Put<int32_t>(r.rank);
  w.PutString(r.name);
  w.Put<uint8_t>(static_cast<uint8_t>(r.op_type));
  w.Put<uint8_t>(static_cast<uint8_t>(r.reduce_op));
  w.Put<uint8_t>(static_cast<uint8_t>(r.dtype));
  w.Put<int32_t>(r.root_rank);
  w.Put<double>(r.prescale);
  w.Put<double>(r.postscale);
  w.Put<int32_t>(r.device);
  w.Put<int32_t>(r.process_set);
  w.Put<uint8_t>(r.out_of_place ? 1 : 0);
  w.PutString(r.error);
  w.Put<int32_t>(r.in_flight);
  w.Put<uint64_t>(r.shapes.size());
  for (const Shape& s : r.shapes) w.PutInts(s);
}

bool GetRequest(WireReader& rd, Request* r) {
  uint8_t op, red, dt, out_of_place;
  uint64_t n;
  if (!rd.Get(&r->rank) || !rd.GetString(&r->name) || !rd.Get(&op) || !rd.Get(&red) ||
      !rd.Get(&dt) || !rd.Get(&r->root_rank) || !rd.Get(&r->prescale) ||
      !rd.Get(&r->postscale) || !rd.Get(&r->device) || !rd.Get(&r->process_set) ||
      !rd.Get(&out_of_place) || !rd.GetString(&r->error) || !rd.Get(&r->in_flight) ||
      !rd.Get(&n) || n > (1u << 24))
    return false;
  r->out_of_place = out_of_place != 0;
  r->op_type = static_cast<OpType>(op);
  r->reduce_op = static_cast<ReduceOp>(red);
  r->dtype = static_cast<DataType>(dt);
  r->shapes.resize(n);
  for (Shape& s : r->shapes)
    if (!rd.GetInts(&s)) return false;
  return true;
}

std::string ShapesString(const Request& r, bool skip_first_dim) {
  std::ostringstream out;
  for (size_t i = 0; i < r.shapes.size(); ++i) {
    Shape s = r.shapes[i];
    std::string text = ShapeString(s);
    if (skip_first_dim && !s.empty()) {
      Shape rest(s.begin() + 1, s.end());
      text = "[*" + std::string(rest.empty() ? "" : ", ") + ShapeString(rest).substr(1);
    }
    out << (i ? ", " : "") << text;
  }
  return r.shapes.size() == 1 ? out.str() : "(" + out.str() + ")";
}

bool SameShapes(const Request& a, const Request& b) {
  if (a.shapes.size() != b.shapes.size()) return false;
  for (size_t i = 0; i < a.shapes.size(); ++i) {
    const Shape& x = a.shapes[i];
    const Shape& y = b.shapes[i];
    if (x.size() != y.size()) return false;
    size_t first = a.FirstDimVaries() ? 1 : 0;
    for (size_t d = first; d < x.size(); ++d)
      if (x[d] != y[d]) return false;
  }
  return true;
}

}  // namespace

std::string SignatureDifference(const Request& a, const Request& b) {
  if (a.op_type != b.op_type) return "collective";
  if (a.dtype != b.dtype) return "dtype";
  if (a.shapes.size() != b.shapes.size()) return "number of tensors";
  if (!SameShapes(a, b)) return "shape";
  if (a.op_type == OpType::kAllreduce || a.op_type == OpType::kReducescatter) {
    if (a.reduce_op != b.reduce_op) return "reduce op";
    if (a.prescale != b.prescale) return "prescale_factor";
    if (a.postscale != b.postscale) return "postscale_factor";
  }
  if (a.op_type == OpType::kBroadcast && a.root_rank != b.root_rank) return "root_rank";
  if ((a.device < 0) != (b.device < 0)) return "device";
  if (a.process_set != b.process_set) return "process set";
  return "";
}

std::string DescribeField(const Request& r, const std::string& field,
                          const std::vector<int>& world_ranks) {
  std::ostringstream out;
  if (field == "collective") out << OpTypeName(r.op_type);
  else if (field == "dtype") out << DataTypeName(r.dtype);
  else if (field == "number of tensors") out << r.shapes.size();
  else if (field == "shape") out << ShapesString(r, r.FirstDimVaries());
  else if (field == "reduce op") out << ReduceOpName(r.reduce_op);
  else if (field == "prescale_factor") out << r.prescale;
  else if (field == "postscale_factor") out << r.postscale;
  else if (field == "root_rank")
    out << (r.root_rank >= 0 && r.root_rank < static_cast<int>(world_ranks.size())
                ? world_ranks[r.root_rank] : r.root_rank);
  else if (field == "device") out << (r.device < 0 ? "CPU" : "GPU");
  else if (field == "process set") out << r.process_set;
  return out.str();
}

std::string SerializeRequests(const std::vector<Request>& requests) {
  WireWriter w;
  w.Put<uint64_t>(requests.size());
  for (const Request& r : requests) PutRequest(w, r);
  return w.Take();
}

Status ParseRequests(const std::string& bytes, std::vector<Request>* requests) {
  WireReader rd(bytes);
  uint64_t n;
  if (!rd.Get(&n) || n > bytes.size()) return Status::Internal("corrupt request list");
  requests->resize(n);
  for (Request& r : *requests)
    if (!GetRequest(rd, &r)) return Status::Internal("corrupt request in request list");
  return rd.done() ? Status::Ok() : Status::Internal("trailing bytes in request list");
}

std::string SerializeResponses(const ResponseList& list) {
  WireWriter w;
  w.PutString(list.fatal_error);
  w.Put<uint64_t>(list.evict_slots.size());
  for (int32_t s : list.evict_slots) w.Put<int32_t>(s);
  w.Put<uint64_t>(list.responses.size());
  for (const Response& r : list.responses) {
    w.Put<uint8_t>(static_cast<uint8_t>(r.kind));
    PutRequest(w, r.request);
    w.PutString(r.error);
    w.Put<int32_t>(r.cache_slot);
    w.Put<int32_t>(r.last_joined_rank);
    w.Put<uint8_t>(r.any_joined ? 1 : 0);
    w.Put<int32_t>(r.overlap_calls);
  }
  w.Put<uint8_t>(list.tune ? 1 : 0);
  if (list.tune) {
    w.Put<int32_t>(list.tune->trial);
    w.Put<int64_t>(list.tune->settings.fusion_threshold_bytes);
    w.Put<double>(list.tune->settings.cycle_time_ms);
    w.Put<uint8_t>(list.tune->final ? 1 : 0);
    w.Put<double>(list.tune->ended_score);
  }
  return w.Take();
}

Status ParseResponses(const std::string& bytes, ResponseList* list) {
  WireReader rd(bytes);
  uint64_t n;
  if (!rd.GetString(&list->fatal_error) || !rd.Get(&n) || n > bytes.size())
    return Status::Internal("corrupt response list");
  list->evict_slots.resize(n);
  for (int32_t& s : list->evict_slots)
    if (!rd.Get(&s)) return Status::Internal("corrupt response list");
  if (!rd.Get(&n) || n > bytes.size()) return Status::Internal("corrupt response list");
  list->responses.resize(n);
  for (Response& r : list->responses) {
    uint8_t kind, joined;
    if (!rd.Get(&kind) || !GetRequest(rd, &r.request) || !rd.GetString(&r.error) ||
        !rd.Get(&r.cache_slot) || !rd.Get(&r.last_joined_rank) || !rd.Get(&joined) ||
        !rd.Get(&r.overlap_calls))
      return Status::Internal("corrupt response in response list");
    r.kind = static_cast<Response::Kind>(kind);
    r.any_joined = joined != 0;
  }
  uint8_t has_tune;
  if (!rd.Get(&has_tune)) return Status::Internal("corrupt response list");
  if (has_tune) {
    TuneDecision d;
    uint8_t final;
    if (!rd.Get(&d.trial) || !rd.Get(&d.settings.fusion_threshold_bytes) ||
        !rd.Get(&d.settings.cycle_time_ms) || !rd.Get(&final) || !rd.Get(&d.ended_score))
      return Status::Internal("corrupt autotune decision in response list");
    d.final = final != 0;
    list->tune = d;
  }
  return rd.done() ? Status::Ok() : Status::Internal("trailing bytes in response list");
}

}  // namespace kerashvd
