#include "runtime/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>

namespace gnnrt {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kSmall = std::size_t{1} << 20;  // below this, plain aligned memory

}  // namespace

void* allocate_huge(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  const std::size_t align = bytes >= kSmall ? kHugePage : 64;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice only; failure is harmless
  return p;
}

void free_huge(void* p) noexcept { std::free(p); }

}  // namespace gnnrt
