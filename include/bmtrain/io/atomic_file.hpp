#pragma once
// Whole files written so that a failure at any moment (a full disk, a crash) leaves the previous
// file, or none, never part of the new one.
#include <string>
#include <string_view>

namespace bmt::io {

// Local (call it on one rank): writes `bytes` as the whole content of `path`. A regular file (or a
// new one) is written to `path`.tmp, flushed to storage (fsync), renamed over `path`, and its
// directory flushed, so the rename survives a power loss too; on failure the temporary is removed.
// A path naming something other than a regular file (a device such as /dev/null, a pipe) is
// written in place. Throws bmt::Error naming the file and the system's reason (no space left, a
// file size limit, permission denied, ...).
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace bmt::io
