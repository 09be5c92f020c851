#include "whereabouts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace trainer {

namespace {

std::string key(int rank) { return "lens/where/" + std::to_string(rank); }

std::vector<std::string> local_addresses() {
  std::vector<std::string> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = a->ifa_addr->sa_family;
    const void* raw =
        family == AF_INET    ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr)
        : family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr)
                             : nullptr;
    if (raw != nullptr && ::inet_ntop(family, raw, text, sizeof text) != nullptr) found.emplace_back(text);
  }
  ::freeifaddrs(list);
  return found;
}

// "2, 3" or "2-5"
std::string rank_list(const std::set<int>& ranks) {
  std::string text;
  for (auto it = ranks.begin(); it != ranks.end();) {
    auto last = it;
    while (std::next(last) != ranks.end() && *std::next(last) == *last + 1) ++last;
    text += (text.empty() ? "" : ", ") + std::to_string(*it);
    if (last != it) text += (*last == *it + 1 ? ", " : "-") + std::to_string(*last);
    it = std::next(last);
  }
  return text;
}

}  // namespace

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

void publish_whereabouts(c10d::Store& store, int rank) {
  std::string text = host_name();
  for (const std::string& address : local_addresses()) text += " " + address;
  store.set(key(rank), std::vector<std::uint8_t>(text.begin(), text.end()));
}

namespace {

std::vector<std::uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text_of(c10d::Store& store, const std::string& name) {
  const std::vector<std::uint8_t> value = store.get(name);
  return {value.begin(), value.end()};
}

// address -> (host, the ranks published there that have not said they failed themselves). A rank that failed is
// alive: it lost a connection too, and when it ends its own connections break; those are not the lost ones.
std::map<std::string, std::pair<std::string, std::set<int>>> lost_ranks_at(c10d::Store& store, int world_size,
                                                                           const std::set<std::string>& addresses) {
  std::map<std::string, std::pair<std::string, std::set<int>>> at;
  for (int r = 0; r < world_size; ++r) {
    if (!store.check({key(r)}) || store.check({"lens/failed/" + std::to_string(r)})) continue;
    std::istringstream words(text_of(store, key(r)));
    std::string host, address;
    words >> host;
    while (words >> address)
      if (addresses.contains(address)) {
        at[address].first = host;
        at[address].second.insert(r);
      }
  }
  return at;
}

}  // namespace

std::string name_lost_peers(c10d::Store& store, const Topology& topology, const std::string& error) {
  static const std::regex kPeer(R"(\[([0-9A-Fa-f.:]+)\]:\d+)");
  std::set<std::string> addresses;
  for (std::sregex_iterator it(error.begin(), error.end(), kPeer), end; it != end; ++it) addresses.insert((*it)[1]);
  if (addresses.empty()) return error;
  const std::string suffix = ": that node, or those ranks, stopped (" + error + ")";
  try {
    store.set("lens/failed/" + std::to_string(topology.rank), bytes("1"));
    const auto at = lost_ranks_at(store, topology.world_size, addresses);
    std::string named;
    for (const auto& [address, host_ranks] : at) {
      const auto& [host, ranks] = host_ranks;
      if (ranks.empty()) continue;
      named += named.empty() ? "" : "; ";
      named.append(ranks.size() == 1 ? "rank " : "ranks ")
          .append(rank_list(ranks))
          .append(" on ")
          .append(host)
          .append(" (")
          .append(address)
          .append(")");
    }
    if (!named.empty()) {
      if (!store.check({"lens/lost"})) store.set("lens/lost", bytes(named));  // for the ranks that learn it second
      return "lost the connection to " + named + suffix;
    }
    // Every peer it lost failed itself first: the first of them named the lost ones (within a few seconds).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!store.check({"lens/lost"}) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (store.check({"lens/lost"})) return "lost the connection to " + text_of(store, "lens/lost") + suffix;
    return "lost the connection to ranks that failed before it (" + error + ")";
  } catch (const std::exception&) {
    std::string all;
    for (const std::string& a : addresses) all += (all.empty() ? "" : ", ") + a;
    return "lost the connection to " + all +
           ", and the rendezvous store with it (hosted by rank 0's node or its launcher's agent: that node is "
           "lost): " +
           error;
  }
}

}  // namespace trainer
