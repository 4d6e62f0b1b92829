#include "bmtrain/kernels/index_check.hpp"

#include "bmtrain/runtime/environment.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt {

namespace {
bool validation_default() {
  return environment().validate_indices.value_or(memory::is_host());
}
bool& validation_flag() {
  static bool on = validation_default();
  return on;
}
}  // namespace

bool index_validation() { return validation_flag(); }
void set_index_validation(bool on) { validation_flag() = on; }

}  // namespace bmt

namespace bmt::kernels {

IndexCheck::IndexCheck() {
  if (index_validation()) slot_ = Tensor::zeros({3}, DType::i64);
}

BadIndexRecord IndexCheck::record() const {
  BadIndexRecord r;
  if (slot_.defined()) r.slot = slot_.data_as<std::int64_t>();
  return r;
}

void IndexCheck::throw_if_bad(const char* op, const char* what, std::int64_t limit, const char* allowed_extra,
                              std::int64_t first_position) const {
  if (!slot_.defined()) return;
  std::int64_t found[3] = {0, 0, 0};
  memory::copy_to_host(found, slot_.data(), sizeof found);
  BMT_REQUIRE(found[0] == 0, op << ": expected " << what << " in [0, " << limit << ")" << allowed_extra << ", found "
                                << found[2] << " at position " << first_position + found[1]);
}

}  // namespace bmt::kernels
