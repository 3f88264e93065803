// Small builders shared by the engine's unit tests.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../controller.h"
#include "../tensor_entry.h"

namespace kerashvd {
namespace testing {

inline Request MakeRequest(const std::string& name, Shape shape,
                           DataType dtype = DataType::kFloat32,
                           OpType op = OpType::kAllreduce) {
  Request r;
  r.name = name;
  r.op_type = op;
  r.dtype = dtype;
  r.shapes = {std::move(shape)};
  return r;
}

// A work item as the controller hands it to fusion: an executable response, no local entry.
inline WorkItem MakeWork(Request request, Response::Kind kind = Response::Kind::kExecute) {
  WorkItem item;
  item.response.kind = kind;
  item.response.request = std::move(request);
  return item;
}

// What `done` reported for each entry, by name (thread-safe; shared by an entry's copies).
class Completions {
 public:
  void Record(const std::string& name, const Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.emplace_back(name, status);
  }
  std::vector<std::pair<std::string, Status>> All() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, Status>> done_;
};

inline TensorEntry MakeEntry(Request request, Completions* completions = nullptr) {
  TensorEntry entry;
  const std::string name = request.name;
  entry.request = std::move(request);
  entry.done = [completions, name](const Status& status, const CollectiveResult&) {
    if (completions) completions->Record(name, status);
  };
  return entry;
}

}  // namespace testing
}  // namespace kerashvd
