// Host build: there are no device communicators to abort.
#include "runtime_internal.hpp"

namespace bmt::detail {
void abort_device_communicators() {}
}  // namespace bmt::detail
