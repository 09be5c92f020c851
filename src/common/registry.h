// A thread-safe table of named extensions with built-ins that cannot be removed: what rank strategies and
// sampling strategies share (register / unregister / look up, the same errors for both), and what a configuration's
// name of one resolves to, where the choice is made.
#pragma once

#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/text.h"
#include "lens/config_error.h"

namespace lens::internal {

template <typename T>
class NamedRegistry {
 public:
  NamedRegistry(std::string kind, std::initializer_list<std::pair<const std::string, T>> builtins)
      : kind_(std::move(kind)), entries_(builtins) {
    for (const auto& entry : builtins) builtins_.insert(entry.first);
  }

  void add(std::string name, T value, bool allow_override) {
    if (name.empty()) throw std::invalid_argument("lens: a " + kind_ + " needs a name");
    std::lock_guard lock(mutex_);
    if (!allow_override && entries_.count(name) != 0)
      throw std::invalid_argument("lens: " + kind_ + " '" + name +
                                  "' is already registered; pass allow_override=true to replace it");
    entries_[std::move(name)] = std::move(value);
  }

  void remove(std::string_view name) {
    std::lock_guard lock(mutex_);
    if (builtins_.count(std::string(name)) != 0)
      throw std::invalid_argument("lens: " + kind_ + " '" + std::string(name) + "' is built in and cannot be removed");
    auto it = entries_.find(name);
    if (it == entries_.end())
      throw std::invalid_argument("lens: " + kind_ + " '" + std::string(name) + "' is not registered");
    entries_.erase(it);
  }

  // A copy, so the caller runs it outside the lock (it may consult the registry itself).
  std::optional<T> find(std::string_view name) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  // What a name chosen in a configuration means: the entry registered under it as written, else under its lower case
  // (the built-ins are lower-case), with the name it was found under. A ConfigError naming the name, `source` (where
  // it was chosen: a variable, a call) and every registered name when neither is registered.
  std::pair<std::string, T> resolve(std::string_view written, std::string_view source) const {
    for (std::string name : {std::string(written), to_lower(written)})
      if (std::optional<T> found = find(name)) return {std::move(name), std::move(*found)};
    throw ConfigError("lens: unknown " + kind_ + " '" + printable_excerpt(written) + "' from " + std::string(source) +
                      "; registered: " + join(names(), ", "));
  }

  bool contains(std::string_view name) const {
    std::lock_guard lock(mutex_);
    return entries_.find(name) != entries_.end();
  }

  // Sorted, as std::map iterates.
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }

 private:
  std::string kind_;
  std::set<std::string> builtins_;
  mutable std::mutex mutex_;  // guards entries_
  std::map<std::string, T, std::less<>> entries_;
};

}  // namespace lens::internal
