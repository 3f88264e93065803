#include "link_model.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "../core/backend/mpi/mpi_algorithm.h"

namespace py = pybind11;

namespace kerashvd {
namespace python {

void RegisterLinkModel(py::module_& m) {
  // This process's MPI setting for MPI_Iallreduce, read through MPI_T: {"name": MPICH's value
  // of MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM ("" for another MPI), "algorithm": what the model
  // makes of it ("MPICH's default", "ring", ..., "unknown")}.
  m.def("flat_allreduce_algorithm", [] {
    const MpiAllreduceSetting setting = ReadMpiAllreduceSetting();
    py::dict out;
    out["name"] = setting.name;
    out["algorithm"] = FlatAlgorithmName(setting.algorithm);
    return out;
  });
  // MPI control variable `name` as text ("" where set so), or None where MPI has none such:
  // what the benchmark prints about MPI's own algorithms.
  m.def("mpi_control_variable", [](const std::string& name) -> py::object {
    bool found = false;
    const std::string text = ReadMpiControlVariable(name, &found);
    if (!found) return py::none();
    return py::str(text);
  });
  // Which path an allreduce of `count` elements (`nbytes` bytes as the backend sees them:
  // its WireType, types.h) takes with hierarchical_allreduce=`mode` ("auto",
  // "on", "off"), ranks on nodes `node_of` and this process's MPI setting; `predefined_op`:
  // whether MPI reduces it with one of its own operations (all but float Min/Max). Returns
  // {"hierarchical": bool, "flat_time": float (-1: not known), "hierarchical_time": float,
  // "describe": str}, link times in units of nbytes over a link's bandwidth.
  m.def("allreduce_path", [](const std::vector<int>& node_of, const std::string& mode,
                             int64_t nbytes, int64_t count, bool predefined_op) {
    LinkModelInputs in;
    in.mode = mode == "on" ? Hierarchical::kOn
              : mode == "off" ? Hierarchical::kOff
                              : Hierarchical::kAuto;
    const MpiAllreduceSetting setting = ReadMpiAllreduceSetting();
    in.algorithm = setting.algorithm;
    in.tree_k = setting.tree_k;
    in.node_of = node_of;
    const LinkModel model(in);
    py::dict out;
    out["hierarchical"] = model.UseHierarchical(nbytes, count, predefined_op);
    out["flat_time"] = model.FlatTime(nbytes, count, predefined_op);
    out["hierarchical_time"] = model.HierarchicalTime();
    out["describe"] = model.Describe();
    return out;
  }, py::arg("node_of"), py::arg("mode"), py::arg("nbytes"), py::arg("count"),
     py::arg("predefined_op") = true);
}

}  // namespace python
}  // namespace kerashvd
