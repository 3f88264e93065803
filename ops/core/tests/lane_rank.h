// LaneRank: one rank's whole Lane (lane.h) over a FakeWorld, for the tests of lanes and of
// what runs inside them (autotune).
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "../lane.h"
#include "fake_backend.h"
#include "fake_world.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {

constexpr auto kWait = std::chrono::seconds(10);

// One rank's lane over `world`, with the engine's parts it borrows. `before_start` runs on the
// lane before its thread starts (e.g. Lane::EnableAutotune).
struct LaneRank {
  LaneRank(FakeWorld* world, int rank, const Config& config = Config(),
           const std::function<void(Lane*)>& before_start = nullptr) {
    LaneTransport transport;
    transport.control = std::make_unique<FakeControlPlane>(world, rank, kTimeout, &abort);
    transport.backend = std::make_unique<FakeBackend>(world, rank, &abort);
    std::vector<int> ranks;
    for (int r = 0; r < world->size(); ++r) ranks.push_back(r);
    lane = std::make_unique<Lane>(0, std::move(transport), ranks, config, &abort, &timeline);
    if (before_start) before_start(lane.get());
    lane->Start();
  }
  // An allreduce of `in` into `out`; the future gets its status.
  std::future<Status> Allreduce(const std::string& name, const std::vector<float>& in,
                                std::vector<float>* out, Status* submitted) {
    auto done = std::make_shared<std::promise<Status>>();
    TensorEntry entry;
    entry.request = MakeRequest(name, {static_cast<int64_t>(in.size())});
    entry.inputs = {in.data()};
    out->assign(in.size(), 0.0f);
    entry.outputs = {out->data()};
    entry.done = [done](const Status& s, const CollectiveResult&) { done->set_value(s); };
    *submitted = lane->Submit(std::move(entry));
    return done->get_future();
  }
  static constexpr std::chrono::milliseconds kTimeout{5000};
  AbortFlag abort;
  Timeline timeline;
  std::unique_ptr<Lane> lane;
};

}  // namespace testing
}  // namespace kerashvd
