// Minimal logging to stderr, each line prefixed with the rank, for stall warnings and the like.
#pragma once

#include <string>

namespace kerashvd {

void LogWarning(int rank, const std::string& message);
void LogInfo(int rank, const std::string& message);

}  // namespace kerashvd
