// The link model of hierarchical_allreduce=auto (ops/core/backend/mpi/link_model.h) for
// Python: what MPI runs for the flat allreduce, and which path an allreduce takes. The tests
// and the benchmark ask it which path auto chose; the engine decides with the same code.
#pragma once

#include <pybind11/pybind11.h>

namespace kerashvd {
namespace python {

// Adds flat_allreduce_algorithm(), mpi_control_variable(name) and allreduce_path(...) to `m`.
void RegisterLinkModel(pybind11::module_& m);

}  // namespace python
}  // namespace kerashvd
