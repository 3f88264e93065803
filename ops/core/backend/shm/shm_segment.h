// ShmSegment: a POSIX shared-memory segment mapped by the processes of one host.
//
// One process creates it under a fresh random name (shm_open with O_EXCL), hands the name to
// the others (the caller's business), they open it, and the creator unlinks the name as soon
// as they have: from then on the segment has no name in /dev/shm, and the kernel frees it
// when the last process unmaps it or exits, however it ends. Nothing is left behind for a
// later job to find, unlike MPICH's own segments (see docs/launching.md, "SLURM").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "../../status.h"

namespace kerashvd {

class ShmSegment {
 public:
  // A new segment of `bytes`, zero-filled, with a name no other segment has.
  static Status Create(int64_t bytes, std::unique_ptr<ShmSegment>* out);
  // The segment another process created under `name`; `bytes` must be its size.
  static Status Open(const std::string& name, int64_t bytes, std::unique_ptr<ShmSegment>* out);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (the creator, once the others have opened it); the mapping stays.
  void Unlink();
  const std::string& name() const { return name_; }
  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  ShmSegment(std::string name, char* data, int64_t bytes, bool owner)
      : name_(std::move(name)), data_(data), bytes_(bytes), owner_(owner) {}
  std::string name_;
  char* data_;
  int64_t bytes_;
  bool owner_;  // created it, and has not unlinked the name yet
};

}  // namespace kerashvd
