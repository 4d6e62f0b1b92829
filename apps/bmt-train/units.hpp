#pragma once
// Numbers as the banner and the step log print them.
#include <string>

namespace bmt_train {

// "1.25 GiB", "312 MiB", "40.2 KiB"
std::string bytes_text(double bytes);

// "124M", "1.56B", "3.2K"
std::string count_text(double n);

// "0.99 s", "7.25 s", "2407.3 s": never in exponent form, however long the run
std::string seconds_text(double seconds);

}  // namespace bmt_train
