#include "mpi_algorithm.h"

#include <mpi.h>

#include <sstream>
#include <string>
#include <vector>

namespace kerashvd {
namespace {

// The control variable `name`'s index, type and enumeration (MPI_T_ENUM_NULL if it has none),
// and (optional) its description; false where the library has no such variable.
bool Find(const char* name, int* index, MPI_T_enum* enumtype, MPI_Datatype* type,
          std::string* description = nullptr) {
  if (MPI_T_cvar_get_index(name, index) != MPI_SUCCESS) return false;
  char found[256];
  int found_len = sizeof(found), desc_len = 0, verbosity, bind, scope;
  if (MPI_T_cvar_get_info(*index, found, &found_len, &verbosity, type, enumtype, nullptr,
                          &desc_len, &bind, &scope) != MPI_SUCCESS)
    return false;
  if (description && desc_len > 0) {
    std::vector<char> text(desc_len + 1, '\0');
    if (MPI_T_cvar_get_info(*index, found, &found_len, &verbosity, type, enumtype, text.data(),
                            &desc_len, &bind, &scope) == MPI_SUCCESS)
      *description = text.data();
  }
  return true;
}

// MPICH's algorithm variables are plain integers whose description lists the names, one a
// line ("auto - Internal algorithm selection ...", "sched_auto - ..."), in the order of their
// values (0, 1, ...). The name of `value` from such a description; "" if it has no such line.
std::string NameFromDescription(const std::string& description, int value) {
  std::istringstream lines(description);
  std::string line;
  int item = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, dash;
    if (!(words >> name >> dash) || dash != "-") continue;
    if (item++ == value) return name;
  }
  return "";
}

// Reads an integer variable (or an enumeration's value); false where there is none.
// `enumtype`, `description` (optional): its enumeration and description.
bool ReadInt(const char* name, int* value, MPI_T_enum* enumtype = nullptr,
             std::string* description = nullptr) {
  int index;
  MPI_T_enum found_enum;
  MPI_Datatype type;
  if (!Find(name, &index, &found_enum, &type, description) || type != MPI_INT) return false;
  MPI_T_cvar_handle handle;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return false;
  const bool ok = count == 1 && MPI_T_cvar_read(handle, value) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  if (enumtype) *enumtype = found_enum;
  return ok;
}

std::string ReadText(const char* name) {
  int index;
  MPI_T_enum enumtype;
  MPI_Datatype type;
  if (!Find(name, &index, &enumtype, &type) || type != MPI_CHAR) return "";
  MPI_T_cvar_handle handle;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return "";
  std::vector<char> text(count + 1, '\0');
  if (MPI_T_cvar_read(handle, text.data()) != MPI_SUCCESS) text[0] = '\0';
  MPI_T_cvar_handle_free(&handle);
  return text.data();
}

// The name of `value` in `enumtype`, else in `description` (NameFromDescription); "" if
// neither names it.
std::string EnumName(MPI_T_enum enumtype, int value, const std::string& description) {
  if (enumtype == MPI_T_ENUM_NULL) return NameFromDescription(description, value);
  int items = 0;
  char enum_name[256];
  int enum_len = sizeof(enum_name);
  if (MPI_T_enum_get_info(enumtype, &items, enum_name, &enum_len) != MPI_SUCCESS) return "";
  for (int i = 0; i < items; ++i) {
    int item_value;
    char item[256];
    int len = sizeof(item);
    if (MPI_T_enum_get_item(enumtype, i, &item_value, item, &len) == MPI_SUCCESS &&
        item_value == value)
      return item;
  }
  return "";
}

}  // namespace

MpiAllreduceSetting ReadMpiAllreduceSetting() {
  MpiAllreduceSetting setting;
  int provided;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return setting;
  int value;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  std::string description;
  if (ReadInt("MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM", &value, &enumtype, &description))
    setting.name = EnumName(enumtype, value, description);
  ReadInt("MPIR_CVAR_IALLREDUCE_RECEXCH_KVAL", &setting.recexch_k);
  ReadInt("MPIR_CVAR_IALLREDUCE_TREE_KVAL", &setting.tree_k);
  setting.tuning_file = !ReadText("MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE").empty();
  MPI_T_finalize();
  setting.algorithm =
      FlatAlgorithmFromMpich(setting.name, setting.recexch_k, setting.tuning_file);
  return setting;
}

std::string ReadMpiControlVariable(const std::string& name, bool* found) {
  *found = false;
  int provided;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return "";
  int index, value;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  MPI_Datatype type;
  std::string text;
  if (Find(name.c_str(), &index, &enumtype, &type)) {
    *found = true;
    if (type == MPI_CHAR) {
      text = ReadText(name.c_str());
    } else if (std::string description;
               ReadInt(name.c_str(), &value, &enumtype, &description)) {
      text = EnumName(enumtype, value, description);
      if (text.empty()) text = std::to_string(value);
    }
  }
  MPI_T_finalize();
  return text;
}

}  // namespace kerashvd
