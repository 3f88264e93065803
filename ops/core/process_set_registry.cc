// Engine's process-set registry: AddProcessSet, AddSplitProcessSets and RemoveProcessSet (the
// protocol is described at the top of engine.h). The queries and Submit's routing are in
// engine.cc.
//
// A registration request is [kind, id, bitmask of world ranks...]:
// - kAddSet: the set's ranks (id 0); every rank sends the same request.
// - kSplitSets: the ranks of this rank's own communicator, none for MPI_COMM_NULL (id 0);
//   the requests differ, and must partition the ranks that name a communicator.
// - kRemoveSet: the id of the call that registered the set (no ranks); every rank sends the
//   same request, also the members of different sets of one split call.
#include <algorithm>
#include <sstream>

#include "backend/mpi/mpi_wait.h"
#include "engine.h"

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

std::string Engine::DescribeRegistration(const uint64_t* request) const {
  const std::vector<int> ranks = RanksOf(request, mpi_->size());
  switch (request[0]) {
    case kRemoveSet: return "remove_process_set(" + std::to_string(request[1]) + ")";
    case kAddSet: return "add_process_set(" + RankList(ranks) + ")";
    case kSplitSets:
      return ranks.empty() ? "ProcessSet(MPI.COMM_NULL)"
                           : "ProcessSet(a communicator of ranks " + RankList(ranks) + ")";
  }
  return "no registration";
}

Status Engine::ExchangeRegistration(const std::vector<uint64_t>& request, const char* what,
                                    std::vector<uint64_t>* all) {
  if (!registry_broken_.ok()) return registry_broken_;
  const int n = static_cast<int>(request.size());
  all->assign(static_cast<size_t>(n) * mpi_->size(), 0);
  MPI_Request pending;
  Status status = MpiStatus(MPI_Iallgather(request.data(), n, MPI_UINT64_T, all->data(), n,
                                           MPI_UINT64_T, registry_comm_, &pending),
                            "MPI_Iallgather");
  WaitPolicy policy;
  policy.timeout_seconds = BackstopTimeout(config_.peer_timeout_seconds);
  policy.first_nap = std::chrono::microseconds(100);
  policy.max_nap = std::chrono::microseconds(10000);
  if (status.ok()) status = MpiWait(&pending, what, &abort_, policy, mpi_->rank());
  if (status.ok()) return status;
  // The allgather may still be in flight: this communicator cannot be used again.
  registry_broken_ = Status::FailedPrecondition(
      "kerashvd cannot register or remove process sets any more: an earlier " +
      std::string(what) + " failed on rank " + std::to_string(mpi_->rank()) + ": " +
      status.message());
  if (abort_.is_set())  // a peer died or froze, and the monitor named it
    return Status::Aborted(std::string(what) + " failed: " + status.message());
  return Status::Aborted(std::string(what) + " failed: every rank must call it with the "
                         "same arguments and in the same order. " + status.message());
}

Status Engine::Disagreement(const char* what, const std::vector<uint64_t>& all, size_t n,
                            const std::string& rule) const {
  std::ostringstream msg;
  msg << "Ranks disagree on " << what << ":";
  for (int r = 0; r < mpi_->size(); ++r)
    msg << " rank " << r << " called " << DescribeRegistration(&all[r * n]) << ";";
  msg << " " << rule;
  return Status::InvalidArgument(msg.str());
}

Status Engine::AgreeOnRegistration(const std::vector<uint64_t>& request, const char* what) {
  std::vector<uint64_t> all;
  KERASHVD_RETURN_IF_ERROR(ExchangeRegistration(request, what, &all));
  const size_t n = request.size();
  for (int r = 1; r < mpi_->size(); ++r)
    if (!std::equal(all.begin(), all.begin() + n, all.begin() + r * n))
      return Disagreement(what, all, n, "every rank must register and remove the same process "
                                        "sets in the same order.");
  return Status::Ok();
}

Status Engine::CreateSets(const std::vector<std::vector<int>>& lists, int my_index,
                          std::vector<int>* ids) {
  // Checked after the agreement, so that every rank gives the same answer.
  for (const std::vector<int>& ranks : lists) {
    if (static_cast<int>(ranks.size()) == mpi_->size())
      return Status::InvalidArgument("a process set with all ranks " + RankList(ranks) +
                                     " is the global process set (id 0); use it instead");
    std::lock_guard<std::mutex> lock(sets_mutex_);
    for (const auto& [existing, set] : sets_)
      if (set->ranks == ranks)
        return Status::InvalidArgument("a process set with ranks " + RankList(ranks) +
                                       " already exists (id " + std::to_string(existing) + ")");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  // Every rank has called (the agreement), so this collective cannot hang on a missing rank.
  // Each set's members share a color; ranks outside every set get MPI_COMM_NULL.
  KERASHVD_RETURN_IF_ERROR(MpiStatus(
      MPI_Comm_split(registry_comm_, my_index >= 0 ? my_index : MPI_UNDEFINED, mpi_->rank(),
                     &comm),
      "MPI_Comm_split"));
  const int registration = next_set_id_;
  ids->clear();
  for (size_t i = 0; i < lists.size(); ++i) {
    auto set = std::make_shared<SetEntry>();
    const int id = next_set_id_++;
    set->id = id;
    set->ranks = lists[i];
    set->registration = registration;
    if (static_cast<int>(i) == my_index) {
      if (GpuPlaneBuilt()) {
        MPI_Comm gpu_comm = MPI_COMM_NULL;
        KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(comm, &gpu_comm), "MPI_Comm_dup"));
        KERASHVD_RETURN_IF_ERROR(MpiContext::FromComm(gpu_comm, &set->gpu_comm));
      }
      KERASHVD_RETURN_IF_ERROR(MpiContext::FromComm(comm, &set->comm));
      set->lane = std::make_unique<Lane>(id, set->comm.get(), set->ranks, config_, &abort_,
                                         &timeline_);
      set->lane->Start();
    }
    std::lock_guard<std::mutex> lock(sets_mutex_);
    sets_[id] = set;
    members_[id] = set->ranks;
    ids->push_back(id);
  }
  return Status::Ok();
}

Status Engine::AddProcessSet(const std::vector<int>& ranks, int* id) {
  std::lock_guard<std::mutex> registry(registry_mutex_);
  KERASHVD_RETURN_IF_ERROR(CheckRanks(ranks, mpi_->size()));
  if (ranks.empty()) return Status::InvalidArgument("a process set needs at least one rank");
  KERASHVD_RETURN_IF_ERROR(
      AgreeOnRegistration(RegistrationRequest(kAddSet, 0, ranks, mpi_->size()), "add_process_set"));
  const bool member = std::binary_search(ranks.begin(), ranks.end(), mpi_->rank());
  std::vector<int> ids;
  KERASHVD_RETURN_IF_ERROR(CreateSets({ranks}, member ? 0 : -1, &ids));
  *id = ids[0];
  return Status::Ok();
}

Status Engine::AddSplitProcessSets(const std::vector<int>& mine, std::vector<int>* ids,
                                   std::vector<std::vector<int>>* lists, int* my_index) {
  std::lock_guard<std::mutex> registry(registry_mutex_);
  const int size = mpi_->size();
  KERASHVD_RETURN_IF_ERROR(CheckRanks(mine, size));
  if (!mine.empty() && !std::binary_search(mine.begin(), mine.end(), mpi_->rank()))
    return Status::InvalidArgument("the communicator of a ProcessSet must contain this rank (" +
                                   std::to_string(mpi_->rank()) + "); received ranks " +
                                   RankList(mine));
  const char* what = "ProcessSet(comm) registration";
  const std::vector<uint64_t> request = RegistrationRequest(kSplitSets, 0, mine, size);
  const size_t n = request.size();
  std::vector<uint64_t> all;
  KERASHVD_RETURN_IF_ERROR(ExchangeRegistration(request, what, &all));

  // Every rank checks the same gathered requests, so every rank reaches the same verdict.
  lists->clear();
  *my_index = -1;
  for (int r = 0; r < size; ++r) {
    const uint64_t* req = &all[r * n];
    if (req[0] != kSplitSets)
      return Disagreement(what, all, n, "every rank must register the same process sets in "
                                        "the same order.");
    const std::vector<int> ranks = RanksOf(req, size);
    if (ranks.empty()) continue;
    for (int q : ranks)
      if (!std::equal(req, req + n, &all[q * n]))
        return Disagreement(what, all, n, "each member of a communicator must pass that "
                                          "communicator, and other ranks a communicator of "
                                          "their own or MPI.COMM_NULL.");
    if (ranks[0] != r) continue;  // listed already, at its lowest rank
    if (std::binary_search(ranks.begin(), ranks.end(), mpi_->rank()))
      *my_index = static_cast<int>(lists->size());
    lists->push_back(ranks);
  }
  if (lists->empty())
    return Status::InvalidArgument("every rank passed MPI.COMM_NULL to ProcessSet: there is no "
                                   "process set to register");
  return CreateSets(*lists, *my_index, ids);
}

Status Engine::RemoveProcessSet(int id, std::vector<int>* removed) {
  std::lock_guard<std::mutex> registry(registry_mutex_);
  if (id == 0) return Status::InvalidArgument("the global process set (id 0) cannot be removed");
  int registration = 0;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(id);
    if (it == sets_.end())
      return Status::InvalidArgument("process set " + std::to_string(id) +
                                     " is not registered (or was already removed)");
    registration = it->second->registration;
  }
  KERASHVD_RETURN_IF_ERROR(AgreeOnRegistration(
      RegistrationRequest(kRemoveSet, static_cast<uint64_t>(registration), {}, mpi_->size()),
      "remove_process_set"));
  std::vector<std::shared_ptr<SetEntry>> gone;
  removed->clear();
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    for (auto it = sets_.begin(); it != sets_.end();) {
      if (it->second->registration != registration) {
        ++it;
        continue;
      }
      removed->push_back(it->first);
      gone.push_back(it->second);
      // The world's lane may still be using the set's GPU plane: it lives until shutdown.
      if (it->second->gpu_comm) retired_.push_back(it->second);
      it = sets_.erase(it);
    }
  }
  // The members stop each lane together (its shutdown is negotiated like a collective).
  for (auto& set : gone)
    if (set->lane) {
      set->lane->RequestShutdown();
      set->lane->Join();
    }
  return Status::Ok();
}

}  // namespace kerashvd
