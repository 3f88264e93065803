// Carried allreduce: a small allreduce whose data rides in the negotiation's own allreduce, so
// that it costs one round trip across the ranks instead of two.
//
// Why: a cached collective normally takes two collectives in a row, the negotiation (the
// bitwise AND of the ready bits, controller.h) and then the data's allreduce. For a small
// tensor both are one network latency, so kerashvd took twice raw MPI's time for it.
//
// The prediction. Every rank ends each cycle with the same work list (controller.h), so every
// rank can make the same guess about the next one. CarryPredictor remembers, for each cache
// slot that made up a cycle's whole work, the slot that made up the next such cycle (a chain
// of small allreduces in a graph: slot 3 follows slot 2; one allreduce per step: slot 2
// follows itself). At the start of a cycle it predicts successor(last slot), if that slot is
// carriable (Carriable: one small tensor of host memory, reduced in its own type on the
// world's lane). A wrong guess costs the payload's bytes in that cycle, never a wrong value.
//
// The message of a cycle with a prediction (uint64 words, the same length on every rank):
//   [header] [element count] [negotiation words ... | carried] [payload, padded to words]
// header: kCarryMagic, the dtype and the reduce op (of the predicted slot, the same
// everywhere); the negotiation words are ANDed as always; `carried` is all ones on a rank that
// has the predicted collective pending (one entry, matching the cache), zero elsewhere; the payload is that rank's input (prescaled), zeros where it has none. The
// reduction (CombineCarry) ANDs the words and reduces the payloads element by element with
// the op. After it, `carried` is all ones only if every rank contributed its data: then the
// payload is the collective's result and the collective is done; otherwise the payload is
// discarded and the collective runs as it would have (its ready bit is in the same message).
//
// Bits. A carried reduction combines the ranks' values in the MPI library's order for a
// user-defined operation on one element (MPICH: recursive doubling), which can differ from its
// order for a plain MPI_SUM on more than two ranks. So that a collective's result does not
// depend on whether the guess held, a carriable allreduce that runs alone in a cycle and was
// not carried goes through the same reduction with no negotiation words (Controller::
// ReduceAlone) wherever the order matters (floating Sum, Average and Product on 3+ ranks).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "message.h"
#include "types.h"

namespace kerashvd {

constexpr uint64_t kCarryMagic = 0x4b43;  // "KC"
// The largest carried payload whatever the setting: larger allreduces may go node by node
// (hierarchical auto starts at 64 KiB), a reduction the carried one does not reproduce.
constexpr int64_t kCarryMaxBytes = 32 * 1024;

// Whether `request` (a cached signature) can be carried on a lane of `world` ranks with
// payloads up to `limit` bytes.
bool Carriable(const Request& request, int64_t limit);
// Whether the ranks' order of combination can change a carriable collective's bits.
bool OrderMatters(const Request& request, int world);

// Layout of a carried message with `and_words` negotiation words and `count` elements of
// `dtype`.
struct CarryLayout {
  // The layout of `request`'s carried message (a carriable allreduce) with `and_words`.
  static CarryLayout Of(const Request& request, int and_words);

  int and_words = 0;
  int64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;

  int header_words() const { return 2; }
  int words_offset() const { return 2; }
  int payload_offset() const { return 2 + and_words; }
  int total_words() const;
  // The message with the header written and everything else zero.
  std::vector<uint64_t> NewMessage() const;
  // Whether a reduced message still holds this layout's header (ranks agreed on it).
  bool HeaderIntact(const uint64_t* message) const;
};

// inout = in combined with inout: the negotiation words ANDed, the payloads reduced by the
// header's op (the host backends' arithmetic: pair_reduce.h). Commutative on bits. A message
// whose header differs from inout's poisons inout's header (HeaderIntact then fails).
void CombineCarry(const uint64_t* in, uint64_t* inout);

// The guess every rank makes alike about the next cycle's collective (see above).
class CarryPredictor {
 public:
  // The slot to carry next cycle, or -1.
  int32_t Predict() const;
  // A cycle's work was the one collective of cache slot `slot` (or, with -1, anything else).
  void Observe(int32_t slot);
  // The cache changed (evictions): what was learnt about slots may no longer hold.
  void Reset();

 private:
  int32_t last_ = -1;
  std::map<int32_t, int32_t> next_;
};

}  // namespace kerashvd
