#include "logging.h"

#include <cstdio>

namespace kerashvd {

void LogWarning(int rank, const std::string& message) {
  std::fprintf(stderr, "[kerashvd rank %d] WARNING: %s\n", rank, message.c_str());
  std::fflush(stderr);
}

void LogInfo(int rank, const std::string& message) {
  std::fprintf(stderr, "[kerashvd rank %d] %s\n", rank, message.c_str());
  std::fflush(stderr);
}

}  // namespace kerashvd
