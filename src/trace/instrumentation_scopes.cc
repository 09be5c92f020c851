#include "trace/instrumentation_scopes.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include "common/log.h"
#include "lens/span.h"
#include "lens/version.h"

namespace lens {
namespace {

struct Scope {
  std::string name, version;
};

// Entries are never freed: a record ended before a later setup may still name one.
std::array<std::atomic<const Scope*>, internal::kMaxInstrumentationScopes> g_scopes{};
std::atomic<std::size_t> g_scope_count{1};  // entry 0 is lens's own, built on first read
std::mutex g_scopes_mutex;                  // serialises additions

const Scope& lens_scope() {
  static const Scope scope{"lens", LENS_VERSION_STRING};
  return scope;
}

}  // namespace

InstrumentationScope instrumentation_scope(std::string_view name, std::string_view version) {
  if (name.empty() || (name == "lens" && (version.empty() || version == LENS_VERSION_STRING))) return {};
  std::lock_guard lock(g_scopes_mutex);
  const std::size_t count = g_scope_count.load(std::memory_order_relaxed);
  for (std::size_t i = 1; i < count; ++i) {
    const Scope* s = g_scopes[i].load(std::memory_order_relaxed);
    if (s->name == name && s->version == version) return {static_cast<std::uint16_t>(i)};
  }
  if (count == internal::kMaxInstrumentationScopes) {
    static bool warned = false;
    if (!std::exchange(warned, true))
      internal::log_warning(
          "lens: more than %zu instrumentation scopes (tracer names and versions); spans of '%.*s' "
          "and any later one are recorded under lens's own",
          internal::kMaxInstrumentationScopes - 1, static_cast<int>(name.size()), name.data());
    return {};
  }
  g_scopes[count].store(new Scope{std::string(name), std::string(version)}, std::memory_order_release);
  g_scope_count.store(count + 1, std::memory_order_release);
  return {static_cast<std::uint16_t>(count)};
}

namespace internal {

ScopeNames scope_names(std::uint16_t id) noexcept {
  const Scope* s = id < kMaxInstrumentationScopes ? g_scopes[id].load(std::memory_order_acquire) : nullptr;
  if (s == nullptr) s = &lens_scope();
  return {s->name, s->version};
}

}  // namespace internal
}  // namespace lens
