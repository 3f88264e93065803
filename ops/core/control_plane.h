// ControlPlane: the few small collectives the negotiation protocol needs, on host memory.
//
// Every call is collective over all ranks and returns Aborted, naming what it waited for,
// when the other ranks do not take part within the peer timeout: a rank that died or hangs
// outside kerashvd turns into an error here instead of a hang.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace kerashvd {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place bitwise AND of `count` words across all ranks.
  virtual Status AllreduceBitwiseAnd(uint64_t* words, int count) = 0;
  // Rank 0 receives every rank's bytes in rank order (its own included); others get nothing.
  virtual Status GatherToRoot(const std::string& send, std::vector<std::string>* received) = 0;
  // Rank 0's `data` replaces `data` on every other rank.
  virtual Status BroadcastFromRoot(std::string* data) = 0;
};

}  // namespace kerashvd
