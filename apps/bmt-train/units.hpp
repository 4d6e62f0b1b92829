#pragma once
// Numbers as the banner and the step log print them.
#include <string>

namespace bmt_train {

// "1.25 GiB", "312 MiB", "40.2 KiB"
std::string bytes_text(double bytes);

// "124M", "1.56B", "3.2K"
std::string count_text(double n);

}  // namespace bmt_train
