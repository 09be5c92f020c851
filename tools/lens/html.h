// `lens report --html FILE`: the report as one self-contained page (it requests nothing: inline SVG drawn by lens, a
// style sheet and a short script of lens's own that zooms, pans and shows a span's details), for what a person would
// rather look at than read: a timeline of chosen steps with one lane per rank (the 1F1B schedule and the links
// between stages as lines; with `--merge`, a rank's torch.profiler trace on a lane below its own), each rank's
// compute per step over the run, loss over the run, the phase breakdown, the straggler and bubble tables, and the rest
// of the text report.
#pragma once

#include <string>

#include "figures.h"
#include "profiler_trace.h"
#include "timeline.h"

namespace lens_tools {

// `figures` from Report::figures(read, /*series=*/true); `timeline` laid out; `steps_shown` says which iterations;
// `merged`: a torch.profiler trace to draw below its rank (throws std::runtime_error when the rank has no span).
std::string render_html(const Figures& figures, const Timeline& timeline, const std::string& steps_shown,
                        const MergedProfile* merged = nullptr);

}  // namespace lens_tools
