#include "whereabouts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
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

std::string name_lost_peers(c10d::Store& store, const Topology& topology, const std::string& error) {
  static const std::regex kPeer(R"(\[([0-9A-Fa-f.:]+)\]:\d+)");
  std::set<std::string> addresses;
  for (std::sregex_iterator it(error.begin(), error.end(), kPeer), end; it != end; ++it) addresses.insert((*it)[1]);
  if (addresses.empty()) return error;
  std::map<std::string, std::pair<std::string, std::set<int>>> at;  // address -> host, ranks
  try {
    for (int r = 0; r < topology.world_size; ++r) {
      if (!store.check({key(r)})) continue;
      const std::vector<std::uint8_t> value = store.get(key(r));
      std::istringstream words(std::string(value.begin(), value.end()));
      std::string host, address;
      words >> host;
      while (words >> address)
        if (addresses.contains(address)) {
          at[address].first = host;
          at[address].second.insert(r);
        }
    }
  } catch (const std::exception& e) {
    std::string all;
    for (const std::string& a : addresses) all += (all.empty() ? "" : ", ") + a;
    return "lost the connection to " + all +
           ", and the rendezvous store with it (hosted by rank 0's node or its launcher's agent: that node is "
           "lost): " +
           error;
  }
  std::string named;
  for (const std::string& address : addresses) {
    named += named.empty() ? "" : "; ";
    const auto found = at.find(address);
    if (found == at.end()) {
      named += address + " (no rank published it)";
      continue;
    }
    const auto& [host, ranks] = found->second;
    named.append(ranks.size() == 1 ? "rank " : "ranks ")
        .append(rank_list(ranks))
        .append(" on ")
        .append(host)
        .append(" (")
        .append(address)
        .append(")");
  }
  return "lost the connection to " + named + ": that node, or those ranks, stopped (" + error + ")";
}

}  // namespace trainer
