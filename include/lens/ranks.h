// lens/ranks.h: which ranks of a distributed job export telemetry (CONTRACT §3).
//
// Decided once per process at setup from rank, world size and local rank. A non-exporting rank behaves exactly
// like disabled telemetry. Built-in strategies: single_rank (default; EXPORT_RANK, negative = last rank),
// all_ranks, sampled (the md5 rule of the Python reference, so the same ranks export), first_rank_per_node.
//
//   lens::register_rank_strategy("even_ranks",
//                                [](const lens::RankStrategyInput& in) { return in.ranks.rank % 2 == 0; });
//   // then MYTRAINER_OTEL_RANK_STRATEGY=even_ranks
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lens/internal/visibility.h"

namespace lens {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  friend bool operator==(const RankInfo&, const RankInfo&) = default;
};

// What a rank strategy decides from.
struct RankStrategyInput {
  RankInfo ranks;
  long long export_rank = -1;       // EXPORT_RANK
  double export_sample_rate = 1.0;  // EXPORT_SAMPLE_RATE
};

using RankStrategy = std::function<bool(const RankStrategyInput&)>;

#if !defined(LENS_DISABLED)

// Rank, world size and local rank from the launcher's environment: torchrun (RANK, WORLD_SIZE, LOCAL_RANK),
// SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), OpenMPI (OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}), PMI
// (PMI_RANK, PMI_SIZE), first found wins per value; absent: rank 0 of 1, local rank 0. Explicit values win
// over the environment. A malformed or inconsistent value throws ConfigError.
LENS_API RankInfo detect_rank_info(std::optional<int> rank = {}, std::optional<int> world_size = {},
                                   std::optional<int> local_rank = {});

// The `sampled` rule: (int(md5(decimal rank)) mod 10000) / 10000. Rank 0 gives 0.785.
LENS_API double sampled_rank_score(int rank);

// Adds a strategy. Registering a name that exists throws std::invalid_argument unless allow_override.
LENS_API void register_rank_strategy(std::string name, RankStrategy strategy, bool allow_override = false);
// Removes a registered strategy; a built-in or unknown name throws std::invalid_argument.
LENS_API void unregister_rank_strategy(std::string_view name);
// Every registered name, sorted.
LENS_API std::vector<std::string> rank_strategy_names();
LENS_API bool has_rank_strategy(std::string_view name);

// Runs the named strategy; an unknown name throws ConfigError naming `source` and the valid names.
LENS_API bool rank_exports(std::string_view strategy, const RankStrategyInput& input,
                           std::string_view source = "rank strategy");

#else  // LENS_DISABLED: header-only no-ops; no rank exports, the launcher is not read.

inline RankInfo detect_rank_info(std::optional<int> = {}, std::optional<int> = {}, std::optional<int> = {}) {
  return {};
}
inline double sampled_rank_score(int) { return 0; }
inline void register_rank_strategy(std::string, RankStrategy, bool = false) {}
inline void unregister_rank_strategy(std::string_view) {}
inline std::vector<std::string> rank_strategy_names() { return {}; }
inline bool has_rank_strategy(std::string_view) { return false; }
inline bool rank_exports(std::string_view, const RankStrategyInput&, std::string_view = {}) { return false; }

#endif

}  // namespace lens
