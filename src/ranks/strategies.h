// Which rank strategy a configuration chose: its name resolved where the choice is made (setup), against the
// strategies registered by then, so reading the configuration depends on no registry.
//
//   const std::string strategy = registered_rank_strategy(config.rank_strategy, config.rank_strategy_source);
#pragma once

#include <string>
#include <string_view>

namespace lens::internal {

// The registered name `written` means: itself, else its lower case (the built-ins are lower-case). A ConfigError
// naming `written`, `source` (where it was chosen) and every registered name when neither is registered.
std::string registered_rank_strategy(std::string_view written, std::string_view source);

}  // namespace lens::internal
