// kerashvd._core: the runtime API for Python (init, shutdown, topology, build flags).
// The collectives themselves are TensorFlow ops in ops/tf; both talk to the same engine.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../core/runtime.h"
#include "facts.h"
#include "link_model.h"

namespace py = pybind11;
using kerashvd::Status;

namespace {

// The one place a C++ Status becomes a Python exception.
void RaiseIfError(const Status& status) {
  if (status.ok()) return;
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
      throw py::value_error(status.message());
    default:
      throw std::runtime_error(status.message());
  }
}

// The engine, for calls that communicate (refused in a forked child, see runtime.h).
std::shared_ptr<kerashvd::Engine> Engine() {
  std::shared_ptr<kerashvd::Engine> engine;
  RaiseIfError(kerashvd::RequireEngine(&engine));
  return engine;
}

// The engine, for queries of this process's own state (they also answer in a forked child).
std::shared_ptr<kerashvd::Engine> QueryEngine() {
  std::shared_ptr<kerashvd::Engine> engine;
  RaiseIfError(kerashvd::RequireEngineForQuery(&engine));
  return engine;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "kerashvd engine runtime (C++).";
  kerashvd::python::RegisterFacts(m);  // DTYPES, REDUCE_OPS, ..., SETTINGS, Config
  kerashvd::python::RegisterLinkModel(m);  // flat_allreduce_algorithm, allreduce_path

  m.def("init", [](const kerashvd::Config& config) {
    Status status;
    {
      py::gil_scoped_release release;
      status = kerashvd::InitRuntime(config);
    }
    RaiseIfError(status);
  });
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    kerashvd::ShutdownRuntime();
  });
  m.def("start_timeline", [](const std::string& path, int64_t max_bytes) {
    RaiseIfError(Engine()->StartTimeline(path, max_bytes));
  });
  m.def("stop_timeline", [] {
    py::gil_scoped_release release;
    if (auto engine = kerashvd::CurrentEngine()) engine->StopTimeline();
  });
  // This rank's straggler records (ops/core/straggler_stats.h) as a dict; no communication.
  m.def("straggler_records", [](bool reset) {
    kerashvd::StragglerCounters c = Engine()->StragglerSnapshot(reset);
    py::dict d;
    d["elapsed_seconds"] = c.elapsed_seconds;
    d["now_seconds"] = c.now_seconds;
    d["transfer_seconds"] = c.transfer_seconds;
    d["transfer_calls"] = c.transfer_calls;
    d["first_seq"] = c.first_seq;
    d["dropped"] = c.dropped;
    d["wait_seconds"] = c.wait_seconds;
    d["entry_lag_seconds"] = c.entry_lag_seconds;
    d["completion_lag_seconds"] = c.completion_lag_seconds;
    d["done_seconds"] = c.done_seconds;
    return d;
  });
  m.def("add_process_set", [](const std::vector<int>& ranks) {
    int id = 0;
    Status status;
    {
      py::gil_scoped_release release;
      status = Engine()->process_sets().Add(ranks, &id);
    }
    RaiseIfError(status);
    return id;
  });
  // Returns (index of this rank's set or -1, [(id, ranks), ...]).
  m.def("add_split_process_sets", [](const std::vector<int>& mine) {
    std::vector<int> ids;
    std::vector<std::vector<int>> lists;
    int my_index = -1;
    Status status;
    {
      py::gil_scoped_release release;
      status = Engine()->process_sets().AddSplit(mine, &ids, &lists, &my_index);
    }
    RaiseIfError(status);
    std::vector<std::pair<int, std::vector<int>>> sets;
    for (size_t i = 0; i < ids.size(); ++i) sets.emplace_back(ids[i], lists[i]);
    return std::make_pair(my_index, sets);
  });
  // The registry's membership check for collective `name` of set `id`: "" when this rank may
  // call it, else why not (Python raises it as kerashvd's InvalidArgumentError).
  m.def("process_set_caller_error", [](int id, const std::string& name) {
    return Engine()->process_sets().CheckCaller(id, name).message();
  });
  // Returns the ids removed: the set's and those registered in the same call.
  m.def("remove_process_set", [](int id) {
    std::vector<int> removed;
    Status status;
    {
      py::gil_scoped_release release;
      status = Engine()->process_sets().Remove(id, &removed);
    }
    RaiseIfError(status);
    return removed;
  });
  // True in a child forked after init(): it holds its parent's state (see runtime.h).
  m.def("is_initialized", [] { return kerashvd::CurrentEngine() != nullptr; });
  // Raises RuntimeError in a child forked after init(), saying that `what` cannot run there.
  m.def("check_not_forked", [](const std::string& what) {
    RaiseIfError(kerashvd::CheckNotForked(what.c_str()));
  });
  m.def("rank", [] { return QueryEngine()->topology().rank; });
  m.def("size", [] { return QueryEngine()->topology().size; });
  m.def("local_rank", [] { return QueryEngine()->topology().local_rank; });
  m.def("local_size", [] { return QueryEngine()->topology().local_size; });
  m.def("cross_rank", [] { return QueryEngine()->topology().cross_rank; });
  m.def("cross_size", [] { return QueryEngine()->topology().cross_size; });
  m.def("is_homogeneous", [] { return QueryEngine()->topology().homogeneous; });
  m.def("mpi_threads_supported", [] { return QueryEngine()->topology().threads_supported; });
  // Whether NCCL was built is a build fact: kerashvd/_build_info.py (CMake writes it).
  m.attr("MPI_BUILT") = true;
}
