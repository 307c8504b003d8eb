#include "kvstore/local/tracked.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "run/run.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace {

std::atomic<uint64_t> g_temp_counter{0};

// Unlinks every file of `dir` whose name starts with `prefix`.
void UnlinkStartingWith(const std::string& dir, const std::string& prefix) {
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (const struct dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const std::string& n : names) ::unlink(JoinPath(dir, n).c_str());
}

}  // namespace

std::string TemporaryName(const std::string& final_path) {
  return StrCat(final_path, ".tmp-tfckpt-", ::getpid(), "-", g_temp_counter++);
}

uint64_t TrackCreated(const std::string& path, TrackKind kind) {
  switch (kind) {
    case TrackKind::kFile:
      return AtUndo([path] { ::unlink(path.c_str()); });
    case TrackKind::kDirectory:
      return AtUndo([path] { ::rmdir(path.c_str()); });
    case TrackKind::kFilesStartingWith:
      return AtUndo([dir = DirectoryOf(path), name = Basename(path)] { UnlinkStartingWith(dir, name); });
  }
  return 0;
}

void ForgetCreated(uint64_t id) { ForgetAtUndo(id); }

absl::Status MoveIntoPlace(const std::string& from, uint64_t from_id, const std::string& to, uint64_t* to_id_out,
                           bool if_absent) {
  if (if_absent) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) return absl::AlreadyExistsError(StrCat(to, ": already exists"));
      if (errno != EINVAL && errno != ENOSYS) return ErrnoError(to, "cannot rename into place", errno);
      // A file system without RENAME_NOREPLACE: link() refuses an existing name too.
      if (::link(from.c_str(), to.c_str()) != 0) {
        if (errno == EEXIST) return absl::AlreadyExistsError(StrCat(to, ": already exists"));
        return ErrnoError(to, "cannot rename into place", errno);
      }
      ::unlink(from.c_str());
    }
    uint64_t to_id = TrackCreated(to);
    ForgetCreated(from_id);
    if (to_id_out != nullptr) *to_id_out = to_id;
    return absl::OkStatus();
  }
  uint64_t to_id = TrackCreated(to);
  struct stat a, b;
  if (::stat(from.c_str(), &a) == 0 && ::stat(to.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    // Two links to one file (a data file linked again over the output of an earlier merge
    // of the same input): rename() would succeed doing nothing and leave `from` behind.
    if (::unlink(from.c_str()) != 0) {
      const int err = errno;
      ForgetCreated(to_id);
      return ErrnoError(from, "cannot remove (already linked as the output)", err);
    }
  } else if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    ForgetCreated(to_id);
    return ErrnoError(to, "cannot rename into place", err);
  }
  ForgetCreated(from_id);
  if (to_id_out != nullptr) *to_id_out = to_id;
  return absl::OkStatus();
}

}  // namespace tfckpt
