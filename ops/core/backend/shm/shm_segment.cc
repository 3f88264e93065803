#include "shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

namespace kerashvd {
namespace {

Status Errno(const std::string& what, const std::string& name) {
  return Status::Internal(what + " of shared-memory segment " + name + " failed: " +
                          std::strerror(errno));
}

Status Map(int fd, const std::string& name, int64_t bytes, char** data) {
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Errno("mmap", name);
  *data = static_cast<char*>(p);
  return Status::Ok();
}

}  // namespace

Status ShmSegment::Create(int64_t bytes, std::unique_ptr<ShmSegment>* out) {
  std::random_device random;
  std::ostringstream text;
  text << "/kerashvd-" << getpid() << "-" << std::hex << random() << random();
  const std::string name = text.str();
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno("shm_open", name);
  // posix_fallocate reserves the pages now, so that a full /dev/shm fails here (an error) and
  // not at the first write into the mapping (SIGBUS).
  int rc = ftruncate(fd, bytes);
  if (rc == 0) rc = posix_fallocate(fd, 0, bytes) == 0 ? 0 : -1;
  char* data = nullptr;
  Status status = rc == 0 ? Map(fd, name, bytes, &data) : Errno("sizing", name);
  close(fd);
  if (!status.ok()) {
    shm_unlink(name.c_str());
    return status;
  }
  out->reset(new ShmSegment(name, data, bytes, true));
  return Status::Ok();
}

Status ShmSegment::Open(const std::string& name, int64_t bytes,
                        std::unique_ptr<ShmSegment>* out) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Errno("shm_open", name);
  struct stat info;
  if (fstat(fd, &info) != 0 || info.st_size != bytes) {
    close(fd);
    return Status::Internal("shared-memory segment " + name + " does not have the expected " +
                            std::to_string(bytes) + " bytes");
  }
  char* data = nullptr;
  Status status = Map(fd, name, bytes, &data);
  close(fd);
  KERASHVD_RETURN_IF_ERROR(status);
  out->reset(new ShmSegment(name, data, bytes, false));
  return Status::Ok();
}

void ShmSegment::Unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

ShmSegment::~ShmSegment() {
  Unlink();
  munmap(data_, static_cast<size_t>(bytes_));
}

}  // namespace kerashvd
