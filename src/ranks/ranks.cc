#include "lens/ranks.h"

#include <openssl/evp.h>

#include <algorithm>
#include <stdexcept>

#include "common/registry.h"
#include "common/text.h"
#include "lens/config.h"
#include "ranks/detect.h"
#include "ranks/strategies.h"

namespace lens {

namespace {

// The first launcher variable that is set, parsed as an int in [min, max].
std::optional<int> launcher_value(const internal::EnvReader& env, std::initializer_list<std::string_view> names,
                                  int min) {
  for (std::string_view name : names)
    if (auto v = env.get(name)) return static_cast<int>(internal::parse_int(*v, min, INT32_MAX));
  return std::nullopt;
}

internal::NamedRegistry<RankStrategy>& registry() {
  // Leaked on purpose: strategies may be asked for from atexit handlers, after static destructors ran.
  static auto* r = new internal::NamedRegistry<RankStrategy>(
      "rank strategy",
      {{"single_rank",
        [](const RankStrategyInput& in) {
          long long target = in.export_rank >= 0 ? in.export_rank : in.ranks.world_size - 1;
          return in.ranks.rank == target;
        }},
       {"all_ranks", [](const RankStrategyInput&) { return true; }},
       {"sampled",
        [](const RankStrategyInput& in) { return sampled_rank_score(in.ranks.rank) < in.export_sample_rate; }},
       {"first_rank_per_node", [](const RankStrategyInput& in) { return in.ranks.local_rank == 0; }}});
  return *r;
}

}  // namespace

namespace internal {

RankInfo detect_rank_info_from(const EnvLookup& lookup, std::optional<int> rank, std::optional<int> world_size,
                               std::optional<int> local_rank) {
  EnvReader env(lookup, "", "");
  RankInfo info;
  info.rank =
      rank ? *rank : launcher_value(env, {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0).value_or(0);
  info.world_size =
      world_size
          ? *world_size
          : launcher_value(env, {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1).value_or(1);
  info.local_rank =
      local_rank
          ? *local_rank
          : launcher_value(env, {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0)
                .value_or(0);
  if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size || info.local_rank < 0) {
    throw ConfigError("lens: inconsistent ranks: rank " + std::to_string(info.rank) + ", world size " +
                      std::to_string(info.world_size) + ", local rank " + std::to_string(info.local_rank) +
                      " (expected 0 <= rank < world size, local rank >= 0)");
  }
  return info;
}

}  // namespace internal

RankInfo detect_rank_info(std::optional<int> rank, std::optional<int> world_size, std::optional<int> local_rank) {
  return internal::detect_rank_info_from(internal::process_env(), rank, world_size, local_rank);
}

double sampled_rank_score(int rank) {
  std::string decimal = std::to_string(rank);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(decimal.data(), decimal.size(), digest, &length, EVP_md5(), nullptr) != 1)
    throw std::runtime_error("lens: OpenSSL could not compute md5");
  // int(hexdigest, 16) mod 10000, folded byte by byte so no 128-bit integer is needed.
  unsigned remainder = 0;
  for (unsigned i = 0; i < length; ++i) remainder = (remainder * 256 + digest[i]) % 10000;
  return remainder / 10000.0;
}

void register_rank_strategy(std::string name, RankStrategy strategy, bool allow_override) {
  if (!strategy) throw std::invalid_argument("lens: rank strategy '" + name + "' has no function");
  registry().add(std::move(name), std::move(strategy), allow_override);
}

void unregister_rank_strategy(std::string_view name) { registry().remove(name); }

std::vector<std::string> rank_strategy_names() { return registry().names(); }

bool has_rank_strategy(std::string_view name) { return registry().contains(name); }

bool rank_exports(std::string_view strategy, const RankStrategyInput& input, std::string_view source) {
  return registry().resolve(strategy, source).second(input);
}

namespace internal {
std::string registered_rank_strategy(std::string_view written, std::string_view source) {
  return registry().resolve(written, source).first;
}

bool a_lower_rank_exports(std::string_view strategy, const RankStrategyInput& own, std::string_view source) {
  const RankStrategy& exports = registry().resolve(strategy, source).second;
  const int node_first_rank = own.ranks.rank - own.ranks.local_rank;
  RankStrategyInput other = own;
  for (int rank = 0; rank < own.ranks.rank; ++rank) {
    other.ranks.rank = rank;
    other.ranks.local_rank = rank >= node_first_rank ? rank - node_first_rank : 0;
    if (exports(other)) return true;
  }
  return false;
}
}  // namespace internal

}  // namespace lens
