#pragma once
// Files a run writes at its end (the loss curve, the timeline) are checked when it starts, so that
// hours of training do not end in an output that cannot be written; and each is written whole or
// not at all.
#include <string>
#include <string_view>

namespace bmt_train {

// Throws bmt::Error "<flag>: cannot write '<path>': <reason>" unless `path` can be opened for
// writing (created if absent, its parent directories too with `create_parents`). An existing file
// is left as it is; one created here is removed again.
void check_output_file(const std::string& flag, const std::string& path, bool create_parents = false);

// Writes `bytes` as the whole of the file `path` that `flag` asked for (bmt::io::write_file_atomic):
// a failed write (a full disk, a file size limit) throws bmt::Error "<flag> '<path>': cannot write
// <what>: <reason>; '<path>' is left as it was".
void write_output_file(const std::string& flag, const std::string& path, const std::string& what,
                       std::string_view bytes);

}  // namespace bmt_train
