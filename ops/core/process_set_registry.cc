#include "process_set_registry.h"

#include <algorithm>
#include <sstream>

#include "types.h"

namespace kerashvd {
namespace {

enum RegistrationKind : uint64_t { kAddSet = 1, kRemoveSet = 2, kSplitSets = 3 };

std::vector<int> RanksOf(const uint64_t* request, int size) {
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r)
    if ((request[2 + r / 64] >> (r % 64)) & 1) ranks.push_back(r);
  return ranks;
}

std::vector<uint64_t> RegistrationRequest(uint64_t kind, uint64_t id, const std::vector<int>& ranks, int size) {
  std::vector<uint64_t> request(2 + (size + 63) / 64, 0);
  request[0] = kind;
  request[1] = id;
  for (int r : ranks) request[2 + r / 64] |= uint64_t{1} << (r % 64);
  return request;
}

Status CheckRanks(const std::vector<int>& ranks, int size) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size || (i > 0 && ranks[i] <= ranks[i - 1]))
      return Status::InvalidArgument("a process set needs distinct ranks in [0, " +
                                     std::to_string(size) + ") in ascending order; received " +
                                     RankList(ranks));
  return Status::Ok();
}

}  // namespace

ProcessSetRegistry::ProcessSetRegistry(std::unique_ptr<Group> group, const AbortFlag* abort,
                                       Host* host)
    : group_(std::move(group)), rank_(group_->rank()), size_(group_->size()), abort_(abort),
      host_(host) {}

std::string ProcessSetRegistry::Describe(const uint64_t* request) const {
  const std::vector<int> ranks = RanksOf(request, size_);
  switch (request[0]) {
    case kRemoveSet: return "remove_process_set(" + std::to_string(request[1]) + ")";
    case kAddSet: return "add_process_set(" + RankList(ranks) + ")";
    case kSplitSets:
      return ranks.empty() ? "ProcessSet(MPI.COMM_NULL)"
                           : "ProcessSet(a communicator of ranks " + RankList(ranks) + ")";
  }
  return "no registration";
}

Status ProcessSetRegistry::Exchange(const std::vector<uint64_t>& request, const char* what,
                                    std::vector<uint64_t>* all) {
  if (!broken_.ok()) return broken_;
  Status status = group_->Allgather(request, what, all);
  if (status.ok()) return status;
  // The allgather may still be in flight: this group cannot be used again.
  broken_ = Status::FailedPrecondition(
      "kerashvd cannot register or remove process sets any more: an earlier " +
      std::string(what) + " failed on rank " + std::to_string(rank_) + ": " + status.message());
  if (abort_ && abort_->is_set())  // a peer died or froze, and the monitor named it
    return Status::Aborted(std::string(what) + " failed: " + status.message());
  return Status::Aborted(std::string(what) + " failed: every rank must call it with the "
                         "same arguments and in the same order. " + status.message());
}

Status ProcessSetRegistry::Disagreement(const char* what, const std::vector<uint64_t>& all,
                                        size_t n, const std::string& rule) const {
  std::ostringstream msg;
  msg << "Ranks disagree on " << what << ":";
  for (int r = 0; r < size_; ++r) msg << " rank " << r << " called " << Describe(&all[r * n]) << ";";
  msg << " " << rule;
  return Status::InvalidArgument(msg.str());
}

Status ProcessSetRegistry::Agree(const std::vector<uint64_t>& request, const char* what) {
  std::vector<uint64_t> all;
  KERASHVD_RETURN_IF_ERROR(Exchange(request, what, &all));
  const size_t n = request.size();
  for (int r = 1; r < size_; ++r)
    if (!std::equal(all.begin(), all.begin() + n, all.begin() + r * n))
      return Disagreement(what, all, n, "every rank must register and remove the same process "
                                        "sets in the same order.");
  return Status::Ok();
}

Status ProcessSetRegistry::CreateSets(const std::vector<std::vector<int>>& lists, int my_index,
                                      std::vector<int>* ids) {
  // Checked after the agreement, so that every rank gives the same answer.
  for (const std::vector<int>& ranks : lists) {
    if (static_cast<int>(ranks.size()) == size_)
      return Status::InvalidArgument("a process set with all ranks " + RankList(ranks) +
                                     " is the global process set (id 0); use it instead");
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [existing, set] : sets_)
      if (set.ranks == ranks)
        return Status::InvalidArgument("a process set with ranks " + RankList(ranks) +
                                       " already exists (id " + std::to_string(existing) + ")");
  }
  // Every rank has called (the agreement), so this collective cannot hang on a missing rank.
  // Each set's members share a color; ranks outside every set get no group.
  std::unique_ptr<Group> mine;
  KERASHVD_RETURN_IF_ERROR(group_->Split(my_index, &mine));
  const int registration = next_id_;
  ids->clear();
  for (size_t i = 0; i < lists.size(); ++i) {
    const int id = next_id_++;
    if (static_cast<int>(i) == my_index)
      KERASHVD_RETURN_IF_ERROR(host_->StartSet(id, lists[i], std::move(mine)));
    std::lock_guard<std::mutex> lock(mutex_);
    sets_[id] = Set{lists[i], registration};
    members_[id] = lists[i];
    ids->push_back(id);
  }
  return Status::Ok();
}

Status ProcessSetRegistry::Add(const std::vector<int>& ranks, int* id) {
  std::lock_guard<std::mutex> registration(registration_mutex_);
  KERASHVD_RETURN_IF_ERROR(CheckRanks(ranks, size_));
  if (ranks.empty()) return Status::InvalidArgument("a process set needs at least one rank");
  KERASHVD_RETURN_IF_ERROR(
      Agree(RegistrationRequest(kAddSet, 0, ranks, size_), "add_process_set"));
  const bool member = std::binary_search(ranks.begin(), ranks.end(), rank_);
  std::vector<int> ids;
  KERASHVD_RETURN_IF_ERROR(CreateSets({ranks}, member ? 0 : -1, &ids));
  *id = ids[0];
  return Status::Ok();
}

Status ProcessSetRegistry::AddSplit(const std::vector<int>& mine, std::vector<int>* ids,
                                    std::vector<std::vector<int>>* lists, int* my_index) {
  std::lock_guard<std::mutex> registration(registration_mutex_);
  KERASHVD_RETURN_IF_ERROR(CheckRanks(mine, size_));
  if (!mine.empty() && !std::binary_search(mine.begin(), mine.end(), rank_))
    return Status::InvalidArgument("the communicator of a ProcessSet must contain this rank (" +
                                   std::to_string(rank_) + "); received ranks " +
                                   RankList(mine));
  const char* what = "ProcessSet(comm) registration";
  const std::vector<uint64_t> request = RegistrationRequest(kSplitSets, 0, mine, size_);
  const size_t n = request.size();
  std::vector<uint64_t> all;
  KERASHVD_RETURN_IF_ERROR(Exchange(request, what, &all));

  // Every rank checks the same gathered requests, so every rank reaches the same verdict.
  lists->clear();
  *my_index = -1;
  for (int r = 0; r < size_; ++r) {
    const uint64_t* req = &all[r * n];
    if (req[0] != kSplitSets)
      return Disagreement(what, all, n, "every rank must register the same process sets in "
                                        "the same order.");
    const std::vector<int> ranks = RanksOf(req, size_);
    if (ranks.empty()) continue;
    for (int q : ranks)
      if (!std::equal(req, req + n, &all[q * n]))
        return Disagreement(what, all, n, "each member of a communicator must pass that "
                                          "communicator, and other ranks a communicator of "
                                          "their own or MPI.COMM_NULL.");
    if (ranks[0] != r) continue;  // listed already, at its lowest rank
    if (std::binary_search(ranks.begin(), ranks.end(), rank_))
      *my_index = static_cast<int>(lists->size());
    lists->push_back(ranks);
  }
  if (lists->empty())
    return Status::InvalidArgument("every rank passed MPI.COMM_NULL to ProcessSet: there is no "
                                   "process set to register");
  return CreateSets(*lists, *my_index, ids);
}

Status ProcessSetRegistry::Remove(int id, std::vector<int>* removed) {
  std::lock_guard<std::mutex> registration(registration_mutex_);
  if (id == 0) return Status::InvalidArgument("the global process set (id 0) cannot be removed");
  int first = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sets_.find(id);
    if (it == sets_.end())
      return Status::InvalidArgument("process set " + std::to_string(id) +
                                     " is not registered (or was already removed)");
    first = it->second.registration;
  }
  KERASHVD_RETURN_IF_ERROR(Agree(
      RegistrationRequest(kRemoveSet, static_cast<uint64_t>(first), {}, size_),
      "remove_process_set"));
  removed->clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = sets_.begin(); it != sets_.end();) {
      if (it->second.registration != first) {
        ++it;
        continue;
      }
      removed->push_back(it->first);
      it = sets_.erase(it);
    }
  }
  // The members stop each lane together (its shutdown is negotiated like a collective).
  host_->StopSets(*removed);
  return Status::Ok();
}

void ProcessSetRegistry::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.clear();
}

Status ProcessSetRegistry::View(int id, ProcessSetView* view) const {
  view->id = id;
  if (id == 0) {  // called for every collective: no per-call list of all ranks
    view->size = size_;
    view->rank = rank_;
    view->ranks.clear();
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end())
    return Status::InvalidArgument("process set " + std::to_string(id) +
                                   " is not registered (or was removed)");
  view->ranks = it->second.ranks;
  view->size = static_cast<int>(view->ranks.size());
  auto at = std::find(view->ranks.begin(), view->ranks.end(), rank_);
  view->rank = at == view->ranks.end() ? -1 : static_cast<int>(at - view->ranks.begin());
  return Status::Ok();
}

std::vector<int> ProcessSetRegistry::Ids() const {
  std::vector<int> ids{0};
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, set] : sets_) ids.push_back(id);
  return ids;
}

bool ProcessSetRegistry::IsMember(int id, int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = members_.find(id);
  return it != members_.end() && std::binary_search(it->second.begin(), it->second.end(), rank);
}

Status ProcessSetRegistry::CheckCaller(int id, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end())
    return Status::InvalidArgument("collective '" + name + "' names process set " +
                                   std::to_string(id) +
                                   ", which is not registered (or was removed). Register it "
                                   "with kerashvd.add_process_set() or init(process_sets=...).");
  if (!std::binary_search(it->second.ranks.begin(), it->second.ranks.end(), rank_))
    return Status::InvalidArgument(
        "rank " + std::to_string(rank_) + " is not in process set " + std::to_string(id) +
        " with ranks " + RankList(it->second.ranks) + ", so it cannot call '" + name +
        "': only the members of a process set may call its collectives (check "
        "process_set.included() first).");
  return Status::Ok();
}

}  // namespace kerashvd
