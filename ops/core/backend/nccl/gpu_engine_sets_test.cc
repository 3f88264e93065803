// kerashvd_gpu_engine_test's process-set cases (see gpu_engine_test.cc for the program).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "gpu_engine_jobs.h"

namespace kerashvd {
namespace gpu_engine_test {

// Process sets on the GPU. Every member submits the collectives of its sets and of the
// world in a burst, in an order that differs from rank to rank; the world's lane puts them in
// one order on every rank, so the sets' NCCL communicators cannot deadlock each other. From
// 3 ranks the sets overlap (evens and all ranks but the last). A host collective of a set runs
// on the set's own lane beside them. Removing the sets stops them, and the world goes on.
namespace {

void RunSetBurst(Engine* e, Tally* t, int rank, const std::vector<std::vector<int>>& sets,
                 const std::vector<int>& ids, const std::vector<int>& world, int64_t n,
                 int step) {
  const std::string suffix = step ? ".cached" : "";
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<std::function<void()>> checks;
  auto job = [&](const std::string& name, OpType op, int set, int64_t rows, bool later) {
    jobs.push_back(std::make_unique<Job>());
    Job* j = jobs.back().get();
    j->entry.request = MakeRequest(name, op, DataType::kFloat32, {{rows}});
    j->entry.process_set = set;
    AddTensor(j, Values(rank, rows), rows, later);
    return j;
  };
  Job* w = job("set.world.gpu", OpType::kAllreduce, 0, n, false);
  checks.push_back([&, w] { Check(t, "set.world.gpu" + suffix, *w, SumOver(world, n)); });
  // A host collective of the first set, on the set's own lane.
  std::vector<float> host_in(n), host_out(n, -1);
  for (int64_t i = 0; i < n; ++i) host_in[i] = static_cast<float>(Value(rank, i));
  Job host;
  host.entry.request = MakeRequest("set.host", OpType::kAllreduce, DataType::kFloat32, {{n}}, -1);
  host.entry.process_set = ids[0];
  host.entry.inputs = {host_in.data()};
  host.entry.outputs = {host_out.data()};
  const bool in_first = std::binary_search(sets[0].begin(), sets[0].end(), rank);
  for (size_t k = 0; k < sets.size(); ++k) {
    const std::vector<int>& members = sets[k];
    auto at = std::find(members.begin(), members.end(), rank);
    if (at == members.end()) continue;
    const std::string tag = "set" + std::to_string(k) + ".";
    Job* a = job(tag + "allreduce", OpType::kAllreduce, ids[k], n, false);
    Job* a2 = job(tag + "allreduce.fused", OpType::kAllreduce, ids[k], 7, false);
    Job* b = job(tag + "broadcast", OpType::kBroadcast, ids[k], n, false);
    const int root = static_cast<int>(members.size()) - 1;  // an index into the set
    b->entry.request.root_rank = root;
    Job* g = job(tag + "allgather", OpType::kAllgather, ids[k], 3, true);
    checks.push_back([&, a, a2, b, g, tag, members, root] {
      Check(t, tag + "allreduce" + suffix, *a, SumOver(members, n));
      Check(t, tag + "allreduce.fused" + suffix, *a2, SumOver(members, 7));
      Check(t, tag + "broadcast" + suffix, *b, Values(members[root], n));
      std::vector<double> gathered;
      for (int r : members)
        for (double v : Values(r, 3)) gathered.push_back(v);
      Check(t, tag + "allgather" + suffix, *g, gathered);
    });
  }
  // Each rank submits in its own order: the world's collective first or last, by rank.
  std::vector<Job*> order;
  for (auto& j : jobs) order.push_back(j.get());
  if (rank % 2 == 1) std::reverse(order.begin(), order.end());
  else std::rotate(order.begin(), order.begin() + 1, order.end());
  if (in_first) order.insert(order.begin() + order.size() / 2, &host);
  const auto start = std::chrono::steady_clock::now();
  RunAll(e, order);
  // Not checked (speed is for benchmarks), but telling: a rank outside a set that idled for
  // the cycle time, or a cached slot left unset, would cost 50 ms or 1 s here.
  if (rank == 0)
    std::printf("[rank 0] process-set burst %d took %.1f ms\n", step,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  for (auto& check : checks) check();
  if (in_first) {
    std::vector<double> got(host_out.begin(), host_out.end());
    t->Record("set.host" + suffix, host.status,
              host.status.ok() ? Compare(DataType::kFloat32, SumOver(sets[0], n), got) : "");
  }
}

}  // namespace

void TestProcessSets(Engine* e, Tally* t, int rank, int size) {
  if (size < 2) return;
  std::vector<std::vector<int>> sets(1);
  for (int r = 0; r < size; r += 2) sets[0].push_back(r);
  if (size >= 3) {
    sets.emplace_back();
    for (int r = 0; r < size - 1; ++r) sets[1].push_back(r);
  }
  std::vector<int> ids(sets.size());
  for (size_t k = 0; k < sets.size(); ++k) {
    Status added = e->process_sets().Add(sets[k], &ids[k]);
    t->Record("set.add." + std::to_string(k), added, "");
    if (!added.ok()) return;
  }
  const int64_t n = 1000;
  std::vector<int> world(size);
  for (int r = 0; r < size; ++r) world[r] = r;
  // Twice: the second burst's names are in the response cache, where a rank outside a set
  // must mark the set's slots ready for them to run.
  for (int step = 0; step < 2; ++step) RunSetBurst(e, t, rank, sets, ids, world, n, step);
  for (size_t k = 0; k < sets.size(); ++k) {
    std::vector<int> removed;
    Status gone = e->process_sets().Remove(ids[k], &removed);
    t->Record("set.remove." + std::to_string(k), gone,
              removed == std::vector<int>{ids[k]} ? "" : "removed other sets than asked for");
  }
  Job after;
  after.entry.request = MakeRequest("set.after.gpu", OpType::kAllreduce, DataType::kFloat32, {{n}});
  AddTensor(&after, Values(rank, n), n);
  RunAll(e, {&after});
  Check(t, "set.after.gpu", after, SumOver(world, n));
}

}  // namespace gpu_engine_test
}  // namespace kerashvd
