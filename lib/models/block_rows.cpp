#include "bmtrain/models/block_rows.hpp"

#include "bmtrain/ops/shape.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::models {

Tensor on_block_rows(const Tensor& x, std::int64_t batch, const char* block,
                     const std::function<Tensor(const Tensor& rows, std::int64_t batch)>& forward_rows) {
  BMT_REQUIRE(x.defined() && (x.dim() == 2 || x.dim() == 3),
              block << ": expected an input [B, T, C] or rows [B*T/tp, C], found "
                    << (x.defined() ? to_string(x.shape()) : "none"));
  if (x.dim() == 3) {
    BMT_REQUIRE(tp_size() == 1, block << ": expected sequence-parallel rows [B*T/tp, C] and the batch at tp "
                                      << tp_size() << ", found an input " << to_string(x.shape()));
    return reshape(forward_rows(reshape(x, {-1, x.size(2)}), x.size(0)), x.shape());
  }
  const std::int64_t tokens = x.size(0) * tp_size();
  BMT_REQUIRE(batch > 0 && tokens % batch == 0, block << ": expected a batch dividing the " << tokens
                                                      << " tokens of the group's rows, found " << batch);
  return forward_rows(x, batch);
}

}  // namespace bmt::models
