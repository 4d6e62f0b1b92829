#pragma once
// Where a run resumes from and where it saves to, checked before any training.
#include <string>

namespace bmt_train {

// --resume PATH: PATH itself when it is a complete step directory, else the newest complete
// step-N directory under it; a bmt::Error when there is none.
std::string resolve_resume(const std::string& path);

// --save ROOT: hours of training must not end in a save that cannot happen, so the root is
// created and written to once at startup (by rank 0; every rank sees the same root).
void check_writable_root(const std::string& root);

}  // namespace bmt_train
