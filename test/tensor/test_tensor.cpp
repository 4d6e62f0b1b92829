// The tensor layer: views share their storage and see the same elements, dtype conversions round
// to nearest even, misuse is an error, and the caching allocator hands a freed block out again
// instead of taking a new one from the system.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {
namespace {

std::vector<float> iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(Tensor, ViewsShareStorageAndSeeTheSameElements) {
  const Tensor x = Tensor::from_floats(iota(24), {2, 3, 4});
  EXPECT_EQ(x.numel(), 24);
  EXPECT_TRUE(x.is_contiguous());
  const Tensor v = x.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.data(), x.data());
  const Tensor s = x.slice(2, 1, 3);  // [2, 3, 2]: elements 1, 2 of each row of 4
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.to_host_floats(), (std::vector<float>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
  const Tensor t = x.select(0, 1).transpose(0, 1);  // [4, 3] of the second matrix
  EXPECT_EQ(t.to_host_floats(), (std::vector<float>{12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23}));
  // A write through a view is seen by the tensor it views.
  x.select(0, 0).zero_();
  const std::vector<float> after = v.to_host_floats();
  EXPECT_EQ(after[11], 0.0f);
  EXPECT_EQ(after[12], 12.0f);
}

TEST(Tensor, ConversionsRoundToNearestEven) {
  // 1 + 2^-8 lies halfway between two bf16 values (1 and 1 + 2^-7): it goes to the even one, 1;
  // 1 + 3 * 2^-8 goes to 1 + 2^-6.
  const Tensor b = Tensor::from_floats({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f}, {3}, DType::bf16);
  EXPECT_EQ(b.to_host_floats(), (std::vector<float>{1.0f, 1.0f + 0x1p-6f, -2.5f}));
  // f16 keeps 10 bits: 1 + 2^-11 goes to 1, 1 + 3 * 2^-11 to 1 + 2^-9.
  const Tensor h = Tensor::from_floats({1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f}, {2}, DType::f16);
  EXPECT_EQ(h.to_host_floats(), (std::vector<float>{1.0f, 1.0f + 0x1p-9f}));
  const Tensor i = Tensor::from_ints({-3, 0, 70000}, {3}, DType::i32);
  EXPECT_EQ(i.to_host_ints(), (std::vector<std::int64_t>{-3, 0, 70000}));
  EXPECT_EQ(Tensor::zeros({5}, DType::bf16).to_host_floats(), std::vector<float>(5, 0.0f));
}

TEST(Tensor, MisuseIsAnError) {
  const Tensor x = Tensor::from_floats(iota(12), {3, 4});
  EXPECT_THROW(x.view({5, -1}), Error);
  EXPECT_THROW(x.slice(1, 2, 9), Error);
  EXPECT_THROW(x.as_strided({3, 4}, {4, 1}, 1), Error);  // the last element past the storage
  EXPECT_THROW(Tensor().numel(), Error);
}

TEST(CachingAllocator, AFreedBlockIsHandedOutAgain) {
  CachingAllocator& allocator = CachingAllocator::instance();
  const MemoryStats before = allocator.stats();
  const std::size_t bytes = std::size_t{1} << 20;
  { const Tensor a = Tensor::empty({static_cast<std::int64_t>(bytes / 4)}); }
  const MemoryStats freed = allocator.stats();
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(freed.reserved_bytes, before.reserved_bytes + bytes);  // kept, not returned
  allocator.reset_peak();
  {
    const Tensor b = Tensor::empty({static_cast<std::int64_t>(bytes / 4)});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % kAllocationAlignment, 0u);
    EXPECT_GE(allocator.stats().allocated_bytes, before.allocated_bytes + bytes);
  }
  const MemoryStats after = allocator.stats();
  EXPECT_EQ(after.system_allocations, freed.system_allocations);  // the cached block served it
  EXPECT_EQ(after.allocations, freed.allocations + 1);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + bytes);
}

// A large cached block serves smaller large requests from its parts, and the parts freed join
// again: the whole serves a request of its size with nothing new from the system, and is given back
// to the system whole.
TEST(CachingAllocator, ALargeBlockIsSplitAndItsFreedPartsJoin) {
  CachingAllocator& allocator = CachingAllocator::instance();
  allocator.release_cached();
  const std::int64_t mib = (std::int64_t{1} << 20) / 4;  // f32 elements in 1 MiB
  const MemoryStats start = allocator.stats();
  void* whole = nullptr;
  { const Tensor a = Tensor::empty({24 * mib}); whole = a.data(); }  // a 24 MiB system allocation, cached
  const MemoryStats cached = allocator.stats();
  EXPECT_EQ(cached.system_allocations, start.system_allocations + 1);
  {
    const Tensor x = Tensor::empty({8 * mib});  // 8 MiB: the first part of the 24 MiB block
    const Tensor y = Tensor::empty({10 * mib});  // 10 MiB of the 16 MiB left
    const Tensor z = Tensor::empty({6 * mib});   // the 6 MiB left, whole
    EXPECT_EQ(x.data(), whole);
    EXPECT_EQ(static_cast<const char*>(y.data()), static_cast<const char*>(whole) + (8 << 20));
    EXPECT_EQ(static_cast<const char*>(z.data()), static_cast<const char*>(whole) + (18 << 20));
    EXPECT_EQ(allocator.stats().system_allocations, cached.system_allocations);
    EXPECT_EQ(allocator.stats().allocated_bytes, start.allocated_bytes + (24u << 20));
    EXPECT_EQ(allocator.stats().reserved_bytes, cached.reserved_bytes);
    // A small request does not take a part of a large block.
    const Tensor small = Tensor::empty({1000});
    EXPECT_EQ(allocator.stats().system_allocations, cached.system_allocations + 1);
  }
  {
    const Tensor again = Tensor::empty({24 * mib});  // the parts joined: the whole block again
    EXPECT_EQ(again.data(), whole);
    EXPECT_EQ(allocator.stats().system_allocations, cached.system_allocations + 1);
  }
  {
    const Tensor part = Tensor::empty({4 * mib});  // a part in use keeps its system allocation
    allocator.release_cached();
    EXPECT_EQ(part.data(), whole);
    EXPECT_EQ(allocator.stats().reserved_bytes, start.reserved_bytes + (24u << 20));
  }
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, start.reserved_bytes);
  EXPECT_EQ(allocator.stats().allocated_bytes, start.allocated_bytes);
}

}  // namespace
}  // namespace bmt
