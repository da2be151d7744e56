// segment.cpp — named shared memory (segment.hpp).
#include "core/transport/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/units.hpp"

namespace distlab {

void make_segment(const std::string& name, std::size_t bytes) {
  auto fail = [&](const char* what, int e) {
    return Error(fmt::format("could not {} /dev/shm{} ({}): {}", what, name,
                             format_bytes(double(bytes)), std::strerror(e)));
  };
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw fail("make", errno);
  const int rc =
      ::ftruncate(fd, off_t(bytes)) != 0 ? errno : ::posix_fallocate(fd, 0, off_t(bytes));
  ::close(fd);
  if (rc != 0) {
    ::shm_unlink(name.c_str());
    throw fail("reserve", rc);
  }
}

void* map_segment(const std::string& name, std::size_t bytes, std::string* why) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    *why = fmt::format("could not open /dev/shm{}: {}", name, std::strerror(errno));
    return nullptr;
  }
  void* p = nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || std::size_t(st.st_size) != bytes) {
    *why = fmt::format("/dev/shm{} holds {} B where {} B were made", name, st.st_size, bytes);
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      *why = fmt::format("could not map /dev/shm{}: {}", name, std::strerror(errno));
      p = nullptr;
    }
  }
  ::close(fd);
  return p;
}

void unmap_segment(void* base, std::size_t bytes) {
  if (base) ::munmap(base, bytes);
}

bool process_ended(int pid) {
  if (pid <= 0) return false;  // not yet registered
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

void remove_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  static const std::regex ours("distlab-(win|mpi)-([0-9]+)(-.*)?");
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(dir)) {
    std::cmatch m;
    if (std::regex_match(e->d_name, m, ours) && process_ended(std::atoi(m[2].str().c_str())))
      stale.push_back(e->d_name);
  }
  ::closedir(dir);
  for (const auto& name : stale) ::shm_unlink(("/" + name).c_str());
}

}  // namespace distlab
