// Rank detection over an injectable environment (tests use a map).
#pragma once

#include <optional>

#include "config/env.h"
#include "lens/ranks.h"

namespace lens::internal {

RankInfo detect_rank_info_from(const EnvLookup& lookup, std::optional<int> rank, std::optional<int> world_size,
                               std::optional<int> local_rank);

}  // namespace lens::internal
