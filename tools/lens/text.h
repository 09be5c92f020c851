// `lens report`'s text form: what a person reads first about a run, the summary before the tables.
//
//   std::cout << render_text(report.figures(read), {.every_step = true});
#pragma once

#include <cstddef>
#include <string>

#include "figures.h"

namespace lens_tools {

// The per-iteration table of a run of more than kStepRowsShown steps is shown only when asked for (`--steps`):
// a long run's 1,000 rows would bury the summary.
inline constexpr std::size_t kStepRowsShown = 20;

struct TextOptions {
  bool every_step = false;
};

// The text, with names from the files as they are (the caller escapes it for a terminal).
std::string render_text(const Figures& figures, const TextOptions& options = {});

}  // namespace lens_tools
