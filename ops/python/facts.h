// The engine's fixed lists for Python: dtypes, reduce ops, op types and engine settings.
#pragma once

#include <pybind11/pybind11.h>

namespace kerashvd {
namespace python {

// Adds DTYPES, REDUCE_OPS, OP_TYPES, SETTINGS, Config and the setting functions to `m`.
void RegisterFacts(pybind11::module_& m);

}  // namespace python
}  // namespace kerashvd
