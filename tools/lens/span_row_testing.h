// A span row as the readers make it, for the tool's unit tests: who wrote it, its name and its times.
#pragma once

#include <cstdint>
#include <string_view>

#include "run_reader.h"

namespace lens_tools {

inline SpanRow span_row(const Origin& origin, std::string_view name, std::uint64_t start_ns, std::uint64_t end_ns) {
  SpanRow r;
  r.origin = &origin;
  r.name = name;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  return r;
}

}  // namespace lens_tools
