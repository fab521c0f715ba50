#include "loom/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "loom/error.h"

namespace loom {

std::string TemporaryPathFor(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

namespace {

// Writes all of `bytes` to `fd`; false on an error (errno set).
bool WriteAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A device, pipe or socket (/dev/stdout, /dev/full, a FIFO) is a stream, not
// a file to replace: written in place (renaming over it would replace the
// device node itself).
void WriteStream(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot write: " + std::strerror(errno));
  const bool ok = WriteAll(fd, bytes);
  const std::string why = std::strerror(errno);
  if (::close(fd) != 0 || !ok) throw Error(path + ": writing failed: " + why);
}

}  // namespace

void WriteFileAtomically(const std::string& target, std::string_view bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(target, ec);
  if (!ec && fs::is_directory(status)) throw Error(target + ": is a folder; expected a file name");
  if (!ec && fs::exists(status) && !fs::is_regular_file(status)) return WriteStream(target, bytes);
  // A link to a file: the file it names is replaced, the link stays.
  std::string path = target;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    const fs::path resolved = fs::weakly_canonical(target, ec);
    if (!ec) path = resolved.string();
  }
  const std::string temp = TemporaryPathFor(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot write " + temp + ": " + std::strerror(errno));
  const auto fail = [&](const char* what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    std::remove(temp.c_str());
    throw Error(path + ": cannot " + what + " " + temp + ": " + why);
  };
  if (!WriteAll(fd, bytes)) fail("write");
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
