// `lens report --html FILE`: the report as one self-contained page (no script, no font, no request: inline SVG
// drawn by lens and a style sheet), for what a person would rather look at than read: a timeline of chosen steps
// with one lane per rank (the 1F1B schedule and the links between stages as lines), step time per rank over the
// run, loss over the run, the phase breakdown, the straggler and bubble tables, and the rest of the text report.
#pragma once

#include <string>

#include "figures.h"
#include "timeline.h"

namespace lens_tools {

// `figures` from Report::figures(read, /*series=*/true); `timeline` laid out; `steps_shown` says which iterations.
std::string render_html(const Figures& figures, const Timeline& timeline, const std::string& steps_shown);

}  // namespace lens_tools
