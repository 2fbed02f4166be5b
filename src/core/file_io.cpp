#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fca {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error(path + ": cannot map (" + std::strerror(errno) + ")");
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

void sync_to_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open to flush to disk (" + std::strerror(errno) + ")");
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  // Some file systems cannot sync a folder (EINVAL); only a file's failed sync loses data.
  if (rc != 0 && !(saved == EINVAL && is_directory(path)))
    throw Error(path + ": cannot flush to disk (" + std::strerror(saved) + ")");
}

std::string parent_folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw Error(path + ": cannot create " + tmp + " (" + std::strerror(errno) + ")");
      write(out);
      out.flush();
      if (!out) throw Error(path + ": write failed (disk full?)");
    }
    // The data reaches the disk before the new name does, and the name before we return: after a
    // crash `path` is the old file or the complete new one, never a renamed empty file.
    sync_to_disk(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(path + ": cannot rename " + tmp + " into place (" + std::strerror(errno) + ")");
    sync_to_disk(parent_folder(path));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void ensure_folder(const std::string& path, const std::string& what) {
  const std::string name = what.empty() ? path : what + " " + path;
  if (path.empty()) throw Error(what + ": the folder name is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error(name + ": exists and is not a folder");
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    // Name the part of the path that is in the way: a parent that is a file, say.
    std::string parent = path;
    while (!parent.empty() && parent != "/" && parent != ".") {
      parent = parent_folder(parent);
      if (::stat(parent.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) throw Error(name + ": cannot create the folder: " + parent + " is not a folder");
        break;
      }
    }
    throw Error(name + ": cannot create the folder (" + ec.message() + ")");
  }
}

void ensure_file_destination(const std::string& path, const std::string& what) {
  const std::string name = what.empty() ? path : what + " " + path;
  if (path.empty()) throw Error(what + ": the file name is empty");
  if (is_directory(path)) throw Error(name + ": is a folder; give a file name");
  const std::string parent = parent_folder(path);
  if (!is_directory(parent)) ensure_folder(parent, what.empty() ? "the folder of " + path : "the folder of " + what + " " + path);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace fca
