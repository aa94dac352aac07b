// Host memory for large tensors: 2 MiB-aligned allocations advised to use
// transparent huge pages. The kernels read rows in data-dependent order
// (x[src[e]]), and with 4 KiB pages nearly every such read of a large array
// also misses the TLB; huge pages remove most of those page walks.
// HugePageAllocator plugs into std::vector. Allocation failure throws
// std::bad_alloc; memory is zero-initialised only by the container.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace gnnrt {

void* allocate_huge(std::size_t bytes);
void free_huge(void* p) noexcept;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_huge(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { free_huge(p); }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

template <typename T>
using HostVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace gnnrt
