#pragma once
// Files a run writes at its end (the loss curve, the timeline) are checked when it starts, so that
// hours of training do not end in an output that cannot be written.
#include <string>

namespace bmt_train {

// Throws bmt::Error "<flag>: cannot write '<path>': <reason>" unless `path` can be opened for
// writing (created if absent, its parent directories too with `create_parents`). An existing file
// is left as it is; one created here is removed again.
void check_output_file(const std::string& flag, const std::string& path, bool create_parents = false);

}  // namespace bmt_train
