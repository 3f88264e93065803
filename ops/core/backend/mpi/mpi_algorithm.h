// What MPI runs for the flat allreduce (MPI_Iallreduce), read from the library itself through
// MPI's tool interface (MPI_T control variables), for the link model (link_model.h).
//
// MPICH names its choice in MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM ("auto" unless the user set
// one; MPI_T gives the value MPICH read from the environment, not a guess from getenv), with
// MPIR_CVAR_IALLREDUCE_RECEXCH_KVAL and _TREE_KVAL for the algorithms that take a radix, and
// MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE, which replaces its built-in choice for "auto".
// An MPI without these variables (Open MPI, ...) reads as FlatAlgorithm::kUnknown.
#pragma once

#include <string>

#include "link_model.h"

namespace kerashvd {

struct MpiAllreduceSetting {
  std::string name;  // MPICH's value of MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM; "" where none
  int recexch_k = 2, tree_k = 2;
  bool tuning_file = false;
  FlatAlgorithm algorithm = FlatAlgorithm::kUnknown;
};

// Reads this process's setting. Local: no communication; works before MPI_Init too.
MpiAllreduceSetting ReadMpiAllreduceSetting();

// The value of MPI control variable `name` as text (an integer, an enumeration's item name or
// a string), or "" with *found false where the library has none such.
std::string ReadMpiControlVariable(const std::string& name, bool* found);

}  // namespace kerashvd
