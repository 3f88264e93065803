// ProcessSetRegistry: the process sets other than the global one (id 0), and the one check of
// who may call their collectives.
//
// Sets are registered collectively: every rank calls Add with the same ranks in the same order
// (at init() or later), and Remove likewise. Each call first compares the ranks' requests in
// one allgather with the peer timeout (Group::Allgather), so that ranks that disagree, or a
// rank that never calls, give every rank an error naming what each rank asked for instead of
// a hang in the split that follows; then the members split a group off the registry's own
// group (a duplicate of the world's), and the registry's Host starts this rank's lane on it.
// AddSplit is the same call for sets given as communicators (Horovod's ProcessSet(comm)):
// there each rank names only its own communicator's members, and one call registers every
// distinct set named.
//
// A registration request is [kind, id, bitmask of world ranks...]:
// - kAddSet: the set's ranks (id 0); every rank sends the same request.
// - kSplitSets: the ranks of this rank's own communicator, none for MPI_COMM_NULL (id 0);
//   the requests differ, and must partition the ranks that name a communicator.
// - kRemoveSet: the id of the call that registered the set (no ranks); every rank sends the
//   same request, also the members of different sets of one split call.
// After a failed exchange the registry's group may still have it in flight: every later
// registration fails, saying why.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "abort_flag.h"
#include "group.h"
#include "status.h"

namespace kerashvd {

// What a rank knows about one process set.
struct ProcessSetView {
  int id = 0;
  int size = 0;            // number of members
  int rank = -1;           // this rank's index among the members; -1 when it is not one
  std::vector<int> ranks;  // the members' world ranks, ascending; left empty for set 0 (all)
};

class ProcessSetRegistry {
 public:
  // What the owner of the lanes does when sets come and go on this rank.
  class Host {
   public:
    virtual ~Host() = default;
    // This rank is a member of the new set `id`; `group` is its members' communicator.
    virtual Status StartSet(int id, const std::vector<int>& ranks,
                            std::unique_ptr<Group> group) = 0;
    // Sets `ids` were removed on every rank: stop this rank's lanes of them.
    virtual void StopSets(const std::vector<int>& ids) = 0;
  };

  // `group`: the registry's own communicator over all ranks (world ranks = its ranks).
  ProcessSetRegistry(std::unique_ptr<Group> group, const AbortFlag* abort, Host* host);

  // Collective over all ranks. `ranks`: ascending, distinct world ranks.
  Status Add(const std::vector<int>& ranks, int* id);
  // Collective over all ranks. `mine`: the world ranks (ascending) of this rank's own
  // communicator, or none for a rank without one (MPI_COMM_NULL). The lists must partition
  // the ranks that name one: each lists itself, and its members name the same list. Each
  // distinct list becomes a set; `ids` and `lists` get them in the order of their lowest rank,
  // `my_index` the index of this rank's set (-1 without one).
  Status AddSplit(const std::vector<int>& mine, std::vector<int>* ids,
                  std::vector<std::vector<int>>* lists, int* my_index);
  // Removes set `id` and the sets registered in the same call; `removed` gets their ids.
  Status Remove(int id, std::vector<int>* removed);
  // Forgets every set (at shutdown; the lanes are stopped by their owner).
  void Clear();

  Status View(int id, ProcessSetView* view) const;
  std::vector<int> Ids() const;
  // Whether world rank `rank` is a member of set `id`, also after the set was removed (ids are
  // never reused): the world's lane asks it of GPU collectives of sets, and every rank must
  // keep giving the same answer while a set is being removed.
  bool IsMember(int id, int rank) const;
  // Ok when this rank may call collective `name` of set `id` (registered, and a member).
  Status CheckCaller(int id, const std::string& name) const;

 private:
  struct Set {
    std::vector<int> ranks;
    int registration = 0;  // the first id registered by the same call
  };
  // Step 1: every rank's request, gathered with the peer timeout (`all`: rank r's request at
  // r * request.size()). Agree also requires them equal.
  Status Exchange(const std::vector<uint64_t>& request, const char* what,
                  std::vector<uint64_t>* all);
  Status Agree(const std::vector<uint64_t>& request, const char* what);
  Status Disagreement(const char* what, const std::vector<uint64_t>& all, size_t n,
                      const std::string& rule) const;
  std::string Describe(const uint64_t* request) const;
  // Step 2, once every rank has the same lists: refuses the global set and existing sets
  // (identically everywhere), then splits one group per list and starts this rank's set.
  Status CreateSets(const std::vector<std::vector<int>>& lists, int my_index,
                    std::vector<int>* ids);

  std::unique_ptr<Group> group_;
  const int rank_;
  const int size_;
  const AbortFlag* abort_;
  Host* host_;
  // Serializes registrations (the callers' threads); mutex_ guards the maps for the queries.
  std::mutex registration_mutex_;
  Status broken_;
  int next_id_ = 1;
  mutable std::mutex mutex_;
  std::map<int, Set> sets_;
  std::map<int, std::vector<int>> members_;  // every set registered, removed ones too
};

}  // namespace kerashvd
