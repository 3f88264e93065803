#include "settings.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace kerashvd {

const std::vector<SettingInfo>& Settings() {
  static const std::vector<SettingInfo> table = {
      {"fusion_threshold_bytes", "KERASHVD_FUSION_THRESHOLD", "", "--fusion-threshold-mb",
       SettingKind::kInteger, 0, "bytes", 1 << 20, "MiB",
       "tensors ready in the same cycle are fused into one collective up to this size; 0 "
       "disables fusion",
       &Config::fusion_threshold_bytes, 1},
      {"cycle_time_ms", "KERASHVD_CYCLE_TIME", "", "--cycle-time-ms", SettingKind::kNumber, 0.01,
       "ms", 1, "ms",
       "sleep of the engine's background thread between negotiation cycles while nothing is "
       "pending on this rank; a submission wakes it at once",
       &Config::cycle_time_ms, 1},
      {"linger_ms", "KERASHVD_LINGER_TIME", "", "--linger-time-ms", SettingKind::kNumber, 0,
       "ms", 1, "ms",
       "after a cycle that ran collectives, the engine's background thread polls for the next "
       "submission this long (yielding its core between polls) before it sleeps: a collective "
       "submitted within it starts its negotiation without waiting for the thread to be woken "
       "(microseconds on an idle core, more on a busy one); 0: sleep at once, spending no "
       "CPU time between collectives (what ranks that share their cores need). Try 0.05 "
       "where each rank has a core to spare",
       &Config::linger_ms, 1},
      {"carry_bytes", "KERASHVD_CARRY_BYTES", "", "--carry-bytes", SettingKind::kInteger, 0,
       "bytes", 1, "bytes",
       "a lone allreduce of CPU memory up to this size (at most 32768) that every rank "
       "predicts from the previous steps travels inside the negotiation's own message, one "
       "round trip across the network instead of two; a wrong prediction costs the bytes, "
       "never a value. 0: never. Rank 0's value holds on every rank",
       &Config::carry_bytes, 1},
      {"cache_capacity", "KERASHVD_CACHE_CAPACITY", "", "--cache-capacity",
       SettingKind::kInteger, 0, "", 1, "",
       "negotiated tensor signatures remembered by the response cache; 0 disables it",
       &Config::cache_capacity, 1},
      {"stall_check_seconds", "KERASHVD_STALL_CHECK_TIME", "", "--stall-check-time",
       SettingKind::kNumber, 0, "seconds", 1, "seconds",
       "time before a collective missing on some ranks is reported; 0: never",
       &Config::stall_check_seconds, 1},
      {"stall_shutdown_seconds", "KERASHVD_STALL_SHUTDOWN_TIME", "", "--stall-shutdown-time",
       SettingKind::kNumber, 0, "seconds", 1, "seconds",
       "time before a collective that some ranks never submit stops kerashvd on every rank "
       "with an error naming it and the missing ranks; 0: never (a stall then waits for "
       "ever). Raise it if rank 0 legitimately works alone for longer (e.g. saves or evaluates "
       "for over 10 minutes while the others wait in a collective)",
       &Config::stall_shutdown_seconds, 1},
      {"peer_timeout_seconds", "KERASHVD_PEER_TIMEOUT", "", "--peer-timeout",
       SettingKind::kNumber, 2, "seconds", 1, "seconds",
       "time without a heartbeat from a rank before it counts as frozen and every rank's "
       "collectives fail naming it. Ranks send heartbeats every second, so it must be >= 2; "
       "dead-rank detection cannot be turned off (0 is refused): to pause a rank in a "
       "debugger, set a large value such as 86400",
       &Config::peer_timeout_seconds, 1},
      {"huge_pages", "KERASHVD_HUGE_PAGES", "", "--huge-pages", SettingKind::kSwitch, 0, "", 1,
       "",
       "1: back large CPU buffers of collectives with transparent huge pages, which speeds "
       "MPI's shared-memory copies; 0: leave memory as TensorFlow allocated it",
       &Config::huge_pages, 1},
      {"shm_allreduce", "KERASHVD_SHM_ALLREDUCE", "", "--shm-allreduce", SettingKind::kSwitch, 0,
       "", 1, "",
       "1: allreduce of a communicator of two ranks on one host (2 ranks per job or process "
       "set) through a shared-memory segment of kerashvd's own, faster than MPI's; 0: "
       "through MPI",
       &Config::shm_allreduce, 1},
      {"hierarchical_allreduce", "KERASHVD_HIERARCHICAL_ALLREDUCE",
       "HOROVOD_HIERARCHICAL_ALLREDUCE", "--hierarchical-allreduce", SettingKind::kMode, 0, "",
       1, "",
       "allreduce node by node: within each node over shared memory, across nodes once per "
       "node (horovodrun's flag and Horovod's variable). on: wherever there are several "
       "nodes; off: never; auto: allreduces of 64 KiB and more where MPI's own algorithm "
       "would keep the nodes' links busy longer (as with ranks placed cyclically, 3+ nodes, "
       "MPICH's recursive doubling or ring), decided alike on every rank",
       &Config::hierarchical_allreduce, 1},
      {"hierarchical_allgather", "KERASHVD_HIERARCHICAL_ALLGATHER",
       "HOROVOD_HIERARCHICAL_ALLGATHER", "--hierarchical-allgather", SettingKind::kMode, 0, "",
       1, "", "allgather node by node: gathered to one rank a node, among those across "
       "nodes, broadcast within each node. on and auto: where there are several nodes and a "
       "node runs several ranks; off: never",
       &Config::hierarchical_allgather, 1},
      {"autotune", "KERASHVD_AUTOTUNE", "HOROVOD_AUTOTUNE", "--autotune", SettingKind::kSwitch,
       0, "", 1, "",
       "1: during the first steps, try fusion thresholds and cycle times on the world's "
       "collectives, and the gradient bucket cap of DistributedOptimizer and "
       "DistributedGradientTape, measuring their throughput, then keep the best (rank 0 "
       "decides, every rank applies each trial at the same cycle or update; results never "
       "change); 0: use the settings as given",
       &Config::autotune, 1},
      {"autotune_log_file", "KERASHVD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG",
       "--autotune-log-file", SettingKind::kPath, 0, "", 1, "",
       "CSV file of autotune's trials (settings, bytes per second, the chosen one), written by "
       "rank 0 (by every rank if the path contains {rank}); empty: none",
       &Config::autotune_log_path, 1},
      {"autotune_warmup_samples", "KERASHVD_AUTOTUNE_WARMUP_SAMPLES",
       "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "--autotune-warmup-samples", SettingKind::kInteger, 0,
       "", 1, "", "samples discarded at the start of each autotune trial",
       &Config::autotune_warmup_samples, 1},
      {"autotune_steps_per_sample", "KERASHVD_AUTOTUNE_STEPS_PER_SAMPLE",
       "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "--autotune-steps-per-sample",
       SettingKind::kInteger, 1, "", 1, "",
       "engine cycles that carry work in one autotune sample; each trial takes 3 samples "
       "after its warm-up",
       &Config::autotune_steps_per_sample, 1},
      {"timeline", "KERASHVD_TIMELINE", "", "--timeline-filename", SettingKind::kPath, 0, "",
       1, "",
       "path of the Chrome-trace timeline of the collectives, written by rank 0 (by every rank "
       "if the path contains {rank}); empty: none",
       &Config::timeline_path, 1},
      {"timeline_max_mb", "KERASHVD_TIMELINE_MAX_MB", "", "--timeline-max-mb",
       SettingKind::kNumber, 0.001, "MiB", 1, "MiB",
       "largest timeline file; recording stops there",
       &Config::timeline_max_bytes, 1 << 20},
  };
  return table;
}

const SettingInfo* FindSetting(const std::string& key) {
  for (const SettingInfo& row : Settings())
    if (key == row.key) return &row;
  return nullptr;
}

namespace {

// The spellings of each Hierarchical mode; the first one of a mode is how it is shown.
struct ModeSpelling {
  const char* text;
  Hierarchical mode;
};
constexpr ModeSpelling kModeSpellings[] = {
    {"auto", Hierarchical::kAuto}, {"on", Hierarchical::kOn},   {"off", Hierarchical::kOff},
    {"1", Hierarchical::kOn},      {"true", Hierarchical::kOn}, {"yes", Hierarchical::kOn},
    {"0", Hierarchical::kOff},     {"false", Hierarchical::kOff}, {"no", Hierarchical::kOff},
};

std::string Trimmed(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

// The whole of `text` as a number (surrounding spaces allowed, as Python's float()).
bool ParseNumber(const std::string& text, double* value) {
  const std::string t = Trimmed(text);
  if (t.empty()) return false;
  char* end = nullptr;
  *value = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

// The shortest text that reads back as `value`: "2.5", "134217728", "0.001".
std::string FormatNumber(double value) {
  if (std::nearbyint(value) == value && std::fabs(value) < 1e18)
    return std::to_string(static_cast<int64_t>(value));
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

// Checks a number against the rule of `kind` and `minimum`.
bool NumberAllowed(SettingKind kind, double minimum, double value) {
  if (!std::isfinite(value) || value < minimum) return false;
  return kind != SettingKind::kInteger || std::nearbyint(value) == value;
}

std::string NumberExpected(SettingKind kind, double minimum, const std::string& text) {
  double value;
  const bool infinite = ParseNumber(text, &value) && !std::isfinite(value);
  const std::string expected =
      (kind == SettingKind::kInteger ? "an integer >= " : "a number >= ") + FormatNumber(minimum);
  if (!infinite) return expected;
  return kind == SettingKind::kInteger ? "a finite number (" + expected + ")"
                                       : "a finite number >= " + FormatNumber(minimum);
}

std::string Expected(const SettingInfo& setting, bool of_flag, const std::string& text) {
  switch (setting.kind) {
    case SettingKind::kInteger:
    case SettingKind::kNumber:
      if (of_flag && setting.flag_scale != 1)  // the flag's value is any number in its unit
        return NumberExpected(SettingKind::kNumber, setting.minimum / setting.flag_scale, text);
      return NumberExpected(setting.kind, setting.minimum, text);
    case SettingKind::kSwitch:
      return "1 (on) or 0 (off)";
    case SettingKind::kMode:
      return "'auto', 'on' (1, true, yes) or 'off' (0, false, no)";
    case SettingKind::kPath:
      return "a path";
  }
  return "a value";
}

// Parses `text` by the setting's rule into a number (kMode: the Hierarchical value as int).
bool ParseValue(const SettingInfo& setting, const std::string& text, double* value) {
  switch (setting.kind) {
    case SettingKind::kInteger:
    case SettingKind::kNumber:
      return ParseNumber(text, value) && NumberAllowed(setting.kind, setting.minimum, *value);
    case SettingKind::kSwitch: {
      const std::string t = Trimmed(text);
      if (t != "0" && t != "1") return false;
      *value = t == "1";
      return true;
    }
    case SettingKind::kMode: {
      std::string t = Trimmed(text);
      for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (const ModeSpelling& spelling : kModeSpellings) {
        if (t == spelling.text) {
          *value = static_cast<int>(spelling.mode);
          return true;
        }
      }
      return false;
    }
    case SettingKind::kPath:
      return true;
  }
  return false;
}

}  // namespace

std::string ExpectedValue(const SettingInfo& setting, bool of_flag) {
  return Expected(setting, of_flag, "");
}

Status ApplySetting(const SettingInfo& setting, const std::string& text, Config* config) {
  double value = 0;
  if (!ParseValue(setting, text, &value))
    return Status::InvalidArgument(Expected(setting, false, text));
  const double scaled = value * setting.field_scale;
  struct Store {
    Config* config;
    double scaled;
    const std::string& text;
    void operator()(int64_t Config::*f) const {
      // Beyond int64 (1e20 bytes) means "no limit": the largest value, not an overflow.
      config->*f = scaled < 9.2e18 ? std::llround(scaled) : std::numeric_limits<int64_t>::max();
    }
    void operator()(double Config::*f) const { config->*f = scaled; }
    void operator()(bool Config::*f) const { config->*f = scaled != 0; }
    void operator()(Hierarchical Config::*f) const {
      config->*f = static_cast<Hierarchical>(static_cast<int>(scaled));
    }
    void operator()(std::string Config::*f) const { config->*f = text; }
  };
  std::visit(Store{config, scaled, text}, setting.field);
  return Status::Ok();
}

std::string SettingText(const SettingInfo& setting, const Config& config) {
  struct Show {
    const Config& config;
    double scale;
    std::string operator()(int64_t Config::*f) const {
      return FormatNumber(static_cast<double>(config.*f) / scale);
    }
    std::string operator()(double Config::*f) const { return FormatNumber(config.*f / scale); }
    std::string operator()(bool Config::*f) const { return config.*f ? "1" : "0"; }
    std::string operator()(Hierarchical Config::*f) const {
      for (const ModeSpelling& spelling : kModeSpellings)
        if (spelling.mode == config.*f) return spelling.text;
      return "auto";
    }
    std::string operator()(std::string Config::*f) const { return config.*f; }
  };
  return std::visit(Show{config, setting.field_scale}, setting.field);
}

Status FlagToVariable(const SettingInfo& setting, const std::string& text, std::string* out) {
  if (setting.kind != SettingKind::kInteger && setting.kind != SettingKind::kNumber) {
    Config scratch;
    KERASHVD_RETURN_IF_ERROR(ApplySetting(setting, text, &scratch));
    *out = setting.kind == SettingKind::kPath ? text : SettingText(setting, scratch);
    return Status::Ok();
  }
  // A scaled flag takes any number in its unit (--fusion-threshold-mb 0.5); the variable
  // then gets the setting's own kind of value.
  const SettingKind kind = setting.flag_scale != 1 ? SettingKind::kNumber : setting.kind;
  double value;
  if (!ParseNumber(text, &value) ||
      !NumberAllowed(kind, setting.minimum / setting.flag_scale, value))
    return Status::InvalidArgument(Expected(setting, true, text));
  value *= setting.flag_scale;
  if (setting.kind == SettingKind::kInteger) value = std::nearbyint(value);
  *out = FormatNumber(value);
  return Status::Ok();
}

const char* SwitchText(const SettingInfo& setting, bool on) {
  if (setting.kind == SettingKind::kMode) return on ? "on" : "off";
  return on ? "1" : "0";
}

}  // namespace kerashvd
