// Files written whole or not at all (see header).
#include "wg/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace wg {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw std::runtime_error(path + ": cannot " + what + " (" + std::strerror(err) + ")");
}

// fsync through a descriptor of its own (Linux syncs the file's data
// whatever the descriptor's mode).
int sync_file(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

}  // namespace

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "create " + tmp, errno);
    write(out);
    out.close();
    if (!out) fail(path, "write", errno);
    if (const int err = sync_file(tmp)) fail(path, "flush it to the disk", err);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "rename the temporary file into place", errno);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_file_atomically(path, [&bytes](std::ostream& out) { out.write(bytes.data(), std::streamsize(bytes.size())); });
}

}  // namespace wg
