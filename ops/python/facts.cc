// The tables of ops/core/types.h and ops/core/settings.h as plain Python data in
// kerashvd._core: tuples of dicts of names, numbers and texts. kerashvd builds its constants
// (kerashvd.Sum, ...), its dtype checks, init()'s settings and kerashvdrun's flags from them,
// so none of these lists is written down in Python.
#include "facts.h"

#include <string>

#include "../core/settings.h"
#include "../core/types.h"

namespace py = pybind11;

namespace kerashvd {
namespace python {
namespace {

py::tuple DataTypeRows() {
  py::list rows;
  for (const DataTypeInfo& t : DataTypes()) {
    py::dict row;
    row["name"] = t.name;
    row["value"] = static_cast<int>(t.dtype);
    row["size"] = t.size;
    row["reducible"] = t.reducible;
    rows.append(row);
  }
  return py::tuple(rows);
}

py::tuple ReduceOpRows() {
  py::list rows;
  for (const ReduceOpInfo& op : ReduceOps()) {
    py::dict row;
    row["name"] = op.name;
    row["value"] = op.value;
    row["implemented"] = op.implemented;
    row["scatter"] = op.scatter;
    rows.append(row);
  }
  return py::tuple(rows);
}

py::tuple OpTypeRows() {
  py::list rows;
  for (const OpTypeInfo& op : OpTypes()) {
    py::dict row;
    row["name"] = op.name;
    row["value"] = static_cast<int>(op.op);
    row["reportable"] = op.reportable;
    rows.append(row);
  }
  return py::tuple(rows);
}

const char* KindName(SettingKind kind) {
  switch (kind) {
    case SettingKind::kInteger: return "integer";
    case SettingKind::kNumber: return "number";
    case SettingKind::kSwitch: return "switch";
    case SettingKind::kMode: return "mode";
    case SettingKind::kPath: return "path";
  }
  return "unknown";
}

py::tuple SettingRows() {
  const Config defaults;
  py::list rows;
  for (const SettingInfo& s : Settings()) {
    py::dict row;
    row["key"] = s.key;
    row["variable"] = s.variable;
    row["horovod_variable"] = s.horovod_variable;
    row["flag"] = s.flag;
    row["kind"] = KindName(s.kind);
    row["minimum"] = s.minimum;
    row["unit"] = s.unit;
    row["flag_unit"] = s.flag_unit;
    row["flag_scale"] = s.flag_scale;
    row["help"] = s.help;
    row["default"] = SettingText(s, defaults);
    row["expected"] = ExpectedValue(s, false);
    row["flag_expected"] = ExpectedValue(s, true);
    if (s.kind == SettingKind::kSwitch || s.kind == SettingKind::kMode) {
      row["on"] = SwitchText(s, true);
      row["off"] = SwitchText(s, false);
    }
    rows.append(row);
  }
  return py::tuple(rows);
}

const SettingInfo& Setting(const std::string& key) {
  const SettingInfo* setting = FindSetting(key);
  if (setting == nullptr) throw py::key_error("no engine setting named '" + key + "'");
  return *setting;
}

}  // namespace

void RegisterFacts(py::module_& m) {
  m.attr("DTYPES") = DataTypeRows();
  m.attr("REDUCE_OPS") = ReduceOpRows();
  m.attr("OP_TYPES") = OpTypeRows();
  m.attr("SETTINGS") = SettingRows();

  // The engine's settings; filled with apply_setting, read with setting_text.
  py::class_<Config>(m, "Config").def(py::init<>());
  // Parses `text` as the value of setting `key` and stores it in `config`. Returns None, or
  // for a bad value what it should be ("a number >= 0.01"): the caller words the error.
  m.def("apply_setting", [](Config* config, const std::string& key,
                            const std::string& text) -> py::object {
    Status status = ApplySetting(Setting(key), text, config);
    if (status.ok()) return py::none();
    return py::str(status.message());
  });
  // The value of setting `key` in `config`, as its KERASHVD_ variable spells it.
  m.def("setting_text", [](const Config& config, const std::string& key) {
    return SettingText(Setting(key), config);
  });
  // (variable text, None) for a kerashvdrun flag's value, or (None, what it should be).
  m.def("flag_to_variable", [](const std::string& key, const std::string& text) -> py::tuple {
    std::string out;
    Status status = FlagToVariable(Setting(key), text, &out);
    if (status.ok()) return py::make_tuple(out, py::none());
    return py::make_tuple(py::none(), status.message());
  });
}

}  // namespace python
}  // namespace kerashvd
