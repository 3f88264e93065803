// Engine's process-set registry: AddProcessSet and RemoveProcessSet (the protocol is
// described at the top of engine.h). The queries and Submit's routing are in engine.cc.
#include <algorithm>
#include <sstream>

#include "backend/mpi/mpi_wait.h"
#include "engine.h"

namespace kerashvd {
namespace {

enum RegistrationKind : uint64_t { kAddSet = 1, kRemoveSet = 2 };

}  // namespace

// A registration request: [kind, id, bitmask of world ranks...] (the id is 0 for an add).
std::string Engine::DescribeRegistration(const uint64_t* request) const {
  if (request[0] == kRemoveSet) return "remove_process_set(" + std::to_string(request[1]) + ")";
  if (request[0] != kAddSet) return "no registration";
  std::vector<int> ranks;
  for (int r = 0; r < mpi_->size(); ++r)
    if ((request[2 + r / 64] >> (r % 64)) & 1) ranks.push_back(r);
  return "add_process_set(" + RankList(ranks) + ")";
}

Status Engine::AgreeOnRegistration(const std::vector<uint64_t>& request, const char* what) {
  if (!registry_broken_.ok()) return registry_broken_;
  const int size = mpi_->size();
  const int n = static_cast<int>(request.size());
  std::vector<uint64_t> all(static_cast<size_t>(n) * size);
  MPI_Request pending;
  Status status = MpiStatus(MPI_Iallgather(request.data(), n, MPI_UINT64_T, all.data(), n,
                                           MPI_UINT64_T, registry_comm_, &pending),
                            "MPI_Iallgather");
  WaitPolicy policy;
  policy.timeout_seconds = config_.peer_timeout_seconds;
  policy.first_nap = std::chrono::microseconds(100);
  policy.max_nap = std::chrono::microseconds(10000);
  if (status.ok()) status = MpiWait(&pending, what, &abort_, policy, mpi_->rank());
  if (!status.ok()) {
    // The allgather may still be in flight: this communicator cannot be used again.
    registry_broken_ = Status::FailedPrecondition(
        "kerashvd cannot register or remove process sets any more: an earlier " +
        std::string(what) + " failed on rank " + std::to_string(mpi_->rank()) + ": " +
        status.message());
    return Status::Aborted(std::string(what) + " failed: every rank must call it with the "
                           "same arguments and in the same order. " + status.message());
  }
  bool same = true;
  for (int r = 1; r < size && same; ++r)
    same = std::equal(all.begin(), all.begin() + n, all.begin() + static_cast<size_t>(r) * n);
  if (same) return Status::Ok();
  std::ostringstream msg;
  msg << "Ranks disagree on " << what << ":";
  for (int r = 0; r < size; ++r)
    msg << " rank " << r << " called " << DescribeRegistration(&all[static_cast<size_t>(r) * n])
        << ";";
  msg << " every rank must register and remove the same process sets in the same order.";
  return Status::InvalidArgument(msg.str());
}

Status Engine::AddProcessSet(const std::vector<int>& ranks, int* id) {
  std::lock_guard<std::mutex> registry(registry_mutex_);
  const int size = mpi_->size();
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size || (i > 0 && ranks[i] <= ranks[i - 1]))
      return Status::InvalidArgument("a process set needs distinct ranks in [0, " +
                                     std::to_string(size) + ") in ascending order; received " +
                                     RankList(ranks));
  if (ranks.empty()) return Status::InvalidArgument("a process set needs at least one rank");
  std::vector<uint64_t> request(2 + (size + 63) / 64, 0);
  request[0] = kAddSet;
  for (int r : ranks) request[2 + r / 64] |= uint64_t{1} << (r % 64);
  KERASHVD_RETURN_IF_ERROR(AgreeOnRegistration(request, "add_process_set"));
  // Checked after the agreement, so that every rank gives the same answer.
  if (static_cast<int>(ranks.size()) == size)
    return Status::InvalidArgument("a process set with all ranks " + RankList(ranks) +
                                   " is the global process set (id 0); use it instead");
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    for (const auto& [existing, set] : sets_)
      if (set->ranks == ranks)
        return Status::InvalidArgument("a process set with ranks " + RankList(ranks) +
                                       " already exists (id " + std::to_string(existing) + ")");
  }

  auto set = std::make_shared<SetEntry>();
  set->ranks = ranks;
  const bool member = std::binary_search(ranks.begin(), ranks.end(), mpi_->rank());
  MPI_Comm comm = MPI_COMM_NULL;
  // Every rank has called (the agreement above), so this collective cannot hang on a
  // missing rank; non-members pass MPI_UNDEFINED and get MPI_COMM_NULL.
  KERASHVD_RETURN_IF_ERROR(MpiStatus(
      MPI_Comm_split(registry_comm_, member ? 0 : MPI_UNDEFINED, mpi_->rank(), &comm),
      "MPI_Comm_split"));
  const int new_id = next_set_id_++;
  if (member) {
    KERASHVD_RETURN_IF_ERROR(MpiContext::FromComm(comm, &set->comm));
    set->lane = std::make_unique<Lane>(new_id, set->comm.get(), ranks, config_, &abort_, &timeline_);
    set->lane->Start();
  }
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    sets_[new_id] = set;
  }
  *id = new_id;
  return Status::Ok();
}

Status Engine::RemoveProcessSet(int id) {
  std::lock_guard<std::mutex> registry(registry_mutex_);
  if (id == 0) return Status::InvalidArgument("the global process set (id 0) cannot be removed");
  std::shared_ptr<SetEntry> set;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(id);
    if (it == sets_.end())
      return Status::InvalidArgument("process set " + std::to_string(id) +
                                     " is not registered (or was already removed)");
    set = it->second;
  }
  std::vector<uint64_t> request(2 + (mpi_->size() + 63) / 64, 0);
  request[0] = kRemoveSet;
  request[1] = static_cast<uint64_t>(id);
  KERASHVD_RETURN_IF_ERROR(AgreeOnRegistration(request, "remove_process_set"));
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    sets_.erase(id);
  }
  // The members stop the lane together (its shutdown is negotiated like a collective).
  if (set->lane) {
    set->lane->RequestShutdown();
    set->lane->Join();
  }
  return Status::Ok();
}

}  // namespace kerashvd
