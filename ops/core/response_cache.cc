#include "response_cache.h"

namespace kerashvd {

int32_t ResponseCache::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

bool ResponseCache::Matches(int32_t slot, const Request& request) const {
  if (!Occupied(slot)) return false;
  const Request& cached = slots_[slot].request;
  return cached.name == request.name && SignatureDifference(cached, request).empty();
}

void ResponseCache::Insert(int32_t slot, const Request& request) {
  if (slot >= num_slots()) slots_.resize(slot + 1);
  if (slots_[slot].occupied) Evict(slot);
  slots_[slot].occupied = true;
  slots_[slot].request = request;
  by_name_[request.name] = slot;
}

void ResponseCache::Evict(int32_t slot) {
  if (!Occupied(slot)) return;
  by_name_.erase(slots_[slot].request.name);
  slots_[slot] = Slot();
  // Trim free slots at the end so the bit vectors stay short.
  while (!slots_.empty() && !slots_.back().occupied) slots_.pop_back();
}

int32_t ResponseCache::FreeSlot() const {
  for (int32_t i = 0; i < num_slots(); ++i)
    if (!slots_[i].occupied) return i;
  if (num_slots() < capacity_) return num_slots();
  return -1;
}

}  // namespace kerashvd
