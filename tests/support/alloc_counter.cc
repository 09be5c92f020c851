#include "support/alloc_counter.h"

#include <cstdlib>
#include <new>

namespace {
// Per thread: the background export thread allocates freely; the question is what the caller's thread does.
thread_local long t_allocations = 0;
}  // namespace

namespace lens::testing {
long allocation_count() noexcept { return t_allocations; }
}  // namespace lens::testing

void* operator new(std::size_t size) {
  ++t_allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
