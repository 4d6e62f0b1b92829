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

// --save ROOT: keeping the last --keep-last checkpoints deletes the oldest in ROOT, so a run saves
// only into a root whose complete checkpoints are its own: one it resumes from (`resumed_from`, a
// step directory, is in ROOT), or none. Otherwise a bmt::Error naming the steps found and how to
// continue them (--resume ROOT) or to write elsewhere.
void check_own_root(const std::string& root, const std::string& resumed_from);

}  // namespace bmt_train
