// ResponseCache: signatures of collectives that were negotiated before, one per slot.
//
// Every rank holds an identical copy: slots are only inserted and evicted by applying the
// coordinator's broadcast ResponseList, in the same order everywhere. A rank whose pending
// tensor matches slot k (same name, same signature) announces it by setting bit k in the
// cycle's bitwise-AND allreduce instead of sending the full request to the coordinator.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace kerashvd {

class ResponseCache {
 public:
  explicit ResponseCache(int64_t capacity) : capacity_(capacity) {}

  int64_t capacity() const { return capacity_; }
  // Slots in use are in [0, num_slots()); the bit vectors have this many bits.
  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()); }
  // The slot holding `name`, or -1.
  int32_t Find(const std::string& name) const;
  // Whether slot k holds exactly this request's signature.
  bool Matches(int32_t slot, const Request& request) const;
  const Request& Get(int32_t slot) const { return slots_[slot].request; }
  bool Occupied(int32_t slot) const { return slot < num_slots() && slots_[slot].occupied; }

  void Insert(int32_t slot, const Request& request);
  void Evict(int32_t slot);
  // The slot the next insertion should use (lowest free one), or -1 when full.
  int32_t FreeSlot() const;
  int64_t size() const { return static_cast<int64_t>(by_name_.size()); }

 private:
  struct Slot {
    bool occupied = false;
    Request request;
  };
  int64_t capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int32_t> by_name_;
};

}  // namespace kerashvd
