// Stragglers (lens/straggler.h): the window and the scoring of gathered summaries.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "bindings.h"
#include "lens/straggler.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// Stragglers (lens/straggler.h): the window and the scoring of gathered summaries (step_phase, on every forward
// and receive, is in phases.cc).
// One rank's summary from Python: its words (a tensor's tolist()); anything else (a float that is not a whole
// number, NaN, the wrong length) becomes a summary the scorer refuses, never a guess.
// One word of a summary: an int in int64's range, or a float that is a whole number below 9e15; nullopt else.
std::optional<std::int64_t> summary_word(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return std::nullopt;
  if (py::isinstance<py::int_>(v)) {
    int overflow = 0;
    const long long word = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0 || (word == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return std::nullopt;
    }
    return word;
  }
  if (!py::isinstance<py::float_>(v)) return std::nullopt;
  const double d = v.cast<double>();
  if (!std::isfinite(d) || d != std::trunc(d) || std::abs(d) > 9e15) return std::nullopt;
  return static_cast<std::int64_t>(d);
}

lens::StragglerSummary summary_from(const py::handle& entry) {
  constexpr std::size_t kWords = lens::StragglerSummary::kWords;
  lens::StragglerSummary refused{.run_tag = -1, .steps = -1};
  if (!py::isinstance<py::sequence>(entry)) return refused;
  std::array<std::int64_t, kWords> words{};
  std::size_t count = 0;
  // Counted as it is iterated, never taken from len(): a sequence may yield more or fewer items than len() says.
  for (const py::handle& v : entry) {
    const std::optional<std::int64_t> word = summary_word(v);
    if (count == kWords || !word) return refused;
    words[count++] = *word;
  }
  return count == kWords ? lens::StragglerSummary::decode(words) : refused;
}

py::dict findings_dict(const lens::StragglerFindings& f) {
  py::list ranks;
  for (const lens::StragglerVerdict& v : f.ranks) {
    py::dict r;
    r["rank"] = v.rank;
    r["stage"] = v.stage;
    r["tensor_rank"] = v.tensor_rank;
    r["host"] = v.host;
    r["local_rank"] = v.local_rank;
    r["scored"] = v.scored;
    r["flagged"] = v.flagged;
    r["score"] = v.score;
    r["compute_ms"] = v.compute_ms;
    r["wait_ms"] = v.wait_ms;
    r["peer_compute_ms"] = v.peer_compute_ms;
    r["peer_wait_ms"] = v.peer_wait_ms;
    r["flagged_windows"] = v.flagged_windows;
    ranks.append(std::move(r));
  }
  py::dict d;
  d["iteration"] = f.iteration;
  d["ranks"] = std::move(ranks);
  d["flagged"] = f.flagged;
  d["missing"] = f.missing;
  d["refused"] = f.refused;
  d["text"] = f.text;
  return d;
}

}  // namespace

void bind_stragglers(py::module_& m) {
  m.def("end_step", &lens::end_step, py::arg("iteration"),
        "Every rank, once per step, after its last phase: closes the step into the window.");
  m.def("straggler_summary_due", &lens::straggler_summary_due, py::arg("iteration"),
        "Whether the step just ended closes a window (every STRAGGLER_INTERVAL steps).");
  m.def(
      "take_straggler_summary",
      [](std::int64_t iteration, int stage, int tensor_rank) {
        const auto words = lens::take_straggler_summary(iteration, stage, tensor_rank).encode();
        return std::vector<std::int64_t>(words.begin(), words.end());
      },
      py::arg("iteration"), py::arg("stage"), py::arg("tensor_rank") = 0,
      "This rank's window (with its host name, local rank and tensor-parallel rank, compared with the ranks of its "
      "stage at the same tensor-parallel position) as non-negative int64 words below 2^53: put them in "
      "its slot of a world_size x len(words) tensor of zeros and all-reduce with SUM.");
  m.def(
      "score_stragglers",
      [](std::int64_t iteration, const py::sequence& by_rank) {
        std::vector<lens::StragglerSummary> summaries;
        summaries.reserve(py::len(by_rank));
        for (const py::handle& entry : by_rank) summaries.push_back(summary_from(entry));
        return lens::score_stragglers(iteration, summaries);
      },
      py::arg("iteration"), py::arg("by_rank"),
      "The lowest exporting rank: hands the gathered summaries (one list of words per rank) to lens's scoring thread, "
      "which scores them, records the metrics and logs a straggler, and returns at once (True); elsewhere False.");
  m.def(
      "take_straggler_findings",
      [](double wait_s) -> py::object {
        if (!(wait_s >= 0 && wait_s <= 3600)) throw py::value_error("wait_s must be in [0, 3600] seconds");
        std::optional<lens::StragglerFindings> found;
        {
          py::gil_scoped_release release;
          found = lens::take_straggler_findings(std::chrono::milliseconds(std::llround(wait_s * 1000)));
        }
        if (!found) return py::none();
        return py::object(findings_dict(*found));
      },
      py::arg("wait_s") = 0.0,
      "The findings of the latest window scored and not yet taken, waiting up to wait_s for a window handed over: a "
      "dict (iteration, ranks, flagged, missing, refused, text), or None.");
}

}  // namespace lens_python
