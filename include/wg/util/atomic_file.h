// Files written whole or not at all, and on the disk before they count.
//
// write_file_atomically writes to PATH.tmp.<pid> beside PATH, flushes it to
// the storage (fsync: a full disk or an exceeded quota that a parallel file
// system reports only then is an error here, not a truncated file), renames
// it over PATH and syncs the directory. A crash leaves the old file or the
// new one, never a part; on an error PATH is untouched and the temporary
// file removed. Errors are std::runtime_error naming PATH and the system's
// reason.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace wg {

void write_file_atomically(const std::string& path, const std::string& bytes);
// The same for a writer that streams: `write` fills the stream (what it
// throws is rethrown after the temporary file is removed).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// fsync of a directory, after a rename in it (best effort: some file systems
// refuse to sync a directory, which is not an error).
void sync_directory(const std::string& dir);

}  // namespace wg
