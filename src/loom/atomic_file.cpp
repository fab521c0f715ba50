#include "loom/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "loom/error.h"

namespace loom {

std::string TemporaryPathFor(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

void WriteFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string temp = TemporaryPathFor(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot write " + temp + ": " + std::strerror(errno));
  const auto fail = [&](const char* what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    std::remove(temp.c_str());
    throw Error(path + ": cannot " + what + " " + temp + ": " + why);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("flush");
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    throw Error(path + ": cannot write " + temp + ": " + why);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    throw Error(path + ": cannot rename " + temp + " to it: " + why);
  }
}

}  // namespace loom
