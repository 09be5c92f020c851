// Which rank strategy a configuration chose: its name resolved where the choice is made (setup), against the
// strategies registered by then, so reading the configuration depends on no registry.
//
//   const std::string strategy = registered_rank_strategy(config.rank_strategy, config.rank_strategy_source);
#pragma once

#include <string>
#include <string_view>

#include "lens/ranks.h"

namespace lens::internal {

// The registered name `written` means: itself, else its lower case (the built-ins are lower-case). A ConfigError
// naming `written`, `source` (where it was chosen) and every registered name when neither is registered.
std::string registered_rank_strategy(std::string_view written, std::string_view source);

// Whether `strategy` (registered) picks a rank below `own`'s: the lowest exporting rank exports the step traces'
// roots (CONTRACT §6). Each lower rank is asked with the local rank it has when it shares this rank's node (the
// node's ranks numbered in a block), else local rank 0: exact for the built-ins, whose lowest pick is rank 0 or a
// rank chosen by number.
bool a_lower_rank_exports(std::string_view strategy, const RankStrategyInput& own, std::string_view source);

}  // namespace lens::internal
