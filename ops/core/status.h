// Status: the one error type of the C++ engine (one error type per layer, converted only at its
// borders; docs/contributing.md, "Rules the code keeps").
//
// Every engine function that can fail returns a Status. It is converted exactly once at each
// border: to an absl::Status in ops/tf, and to a Python exception in ops/python.
#pragma once

#include <string>
#include <utility>

namespace kerashvd {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,    // the caller passed something wrong (shape, dtype, argument)
    kFailedPrecondition, // the engine is in the wrong state (not initialized, shut down)
    kMismatch,           // ranks disagree about a collective (shape, dtype, op, root)
    kAborted,            // the engine stopped (stall shutdown, peer failure, shutdown())
    kUnimplemented,      // this backend cannot run this operation
    kInternal,           // a bug or a failure inside MPI/NCCL
  };

  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  static Status Mismatch(std::string m) { return {Code::kMismatch, std::move(m)}; }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

#define KERASHVD_RETURN_IF_ERROR(expr)          \
  do {                                          \
    ::kerashvd::Status _status = (expr);        \
    if (!_status.ok()) return _status;          \
  } while (0)

}  // namespace kerashvd
