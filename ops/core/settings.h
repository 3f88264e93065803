// The engine settings table: for each field of Config that users set, its init() keyword, its
// KERASHVD_* variable, its kerashvdrun flag, the rule its values follow and what it does. Its
// default is the field's initializer in config.h.
//
// Python reads this table through kerashvd._core (ops/python/facts.cc):
// kerashvd/runtime/config.py builds init()'s keywords and the variables from it, the
// launcher's engine_flags.py its flags and their help. A setting is added here (and as a
// Config field) and nowhere else.
//
// Values arrive as text, as a variable spells them; ApplySetting parses, checks and stores
// them, so the rule for each setting lives here only. Keyword values are turned into text by
// Python first (True -> "1", 2.5 -> "2.5").
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "config.h"
#include "status.h"

namespace kerashvd {

enum class SettingKind {
  kInteger,  // a whole number >= minimum ("1e6" is one)
  kNumber,   // a finite number >= minimum
  kSwitch,   // 1 or 0
  kMode,     // auto, on (1, true, yes) or off (0, false, no), any case
  kPath,     // any text; empty: none
};

// The Config field a setting writes.
using SettingField = std::variant<int64_t Config::*, double Config::*, bool Config::*,
                                  Hierarchical Config::*, std::string Config::*>;

struct SettingInfo {
  const char* key;               // init() keyword
  const char* variable;          // KERASHVD_* environment variable
  const char* horovod_variable;  // Horovod's variable for it, also accepted ("" if none)
  const char* flag;              // kerashvdrun flag ("--fusion-threshold-mb")
  SettingKind kind;
  double minimum;                // kInteger and kNumber only
  const char* unit;              // unit of the keyword's and the variable's value ("" if none)
  double flag_scale;             // variable value = flag value * flag_scale
  const char* flag_unit;         // unit of the flag's value
  const char* help;              // what it does, without unit or default (those are columns)
  SettingField field;
  double field_scale;            // field value = variable value * field_scale
};

// Every setting, in the order help texts list them.
const std::vector<SettingInfo>& Settings();
// The setting of init() keyword `key`, or nullptr.
const SettingInfo* FindSetting(const std::string& key);

// What a value must be, for messages: "a number >= 0.01", "1 (on) or 0 (off)". For the flag
// (`of_flag`), in the flag's unit.
std::string ExpectedValue(const SettingInfo& setting, bool of_flag);

// Parses `text` (as the variable spells it) and stores it in `config`. On a bad value:
// InvalidArgument whose message is ExpectedValue(setting, false).
Status ApplySetting(const SettingInfo& setting, const std::string& text, Config* config);

// The setting's value in `config` as its variable spells it ("134217728", "2.5", "auto").
std::string SettingText(const SettingInfo& setting, const Config& config);

// The variable's text for the flag's value `text` ("2" MiB -> "2097152"). On a bad value:
// InvalidArgument whose message is ExpectedValue(setting, true).
Status FlagToVariable(const SettingInfo& setting, const std::string& text, std::string* out);

// The variable's text for a switch or mode flag given as --NAME (`on`) or --no-NAME.
const char* SwitchText(const SettingInfo& setting, bool on);

}  // namespace kerashvd
