// Counts the calling thread's heap allocations in a test binary that links alloc_counter.cc (it replaces
// operator new), so a test can prove a path allocates nothing.
#pragma once

namespace lens::testing {
long allocation_count() noexcept;
}  // namespace lens::testing
