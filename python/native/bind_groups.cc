// Span groups and catalogues: the catalogues NeMo Lens and Megatron-LM define, one built from Python classes, and
// which groups are on.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "lens/control.h"
#include "lens/groups.h"
#include "lens/megatron.h"
#include "spans.h"

namespace py = pybind11;

namespace lens_python {

namespace {

// A catalogue keeps its names as views: names that come from Python are kept here for the process's life.
std::string_view interned(const std::string& name) {
  static std::set<std::string, std::less<>> names;
  return *names.insert(name).first;
}

py::tuple catalogue_description(const lens::Catalogue& c) {
  std::vector<std::string> groups = group_names(c, c.all());
  PresetList presets;
  for (std::size_t i = 0; i < c.preset_count(); ++i)
    presets.emplace_back(std::string(c.preset(i).name), group_names(c, c.preset(i).groups));
  return py::make_tuple(groups, presets);
}

}  // namespace

std::vector<std::string> group_names(const lens::Catalogue& c, lens::GroupSet set) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < c.group_count(); ++i) {
    lens::SpanGroup g(static_cast<std::uint8_t>(i));
    if (set.contains(g)) out.emplace_back(c.group_name(g));
  }
  return out;
}

lens::Catalogue make_catalogue(const std::vector<std::string>& groups, const PresetList& presets) {
  try {
    lens::Catalogue c;
    for (const std::string& g : groups) c.add_group(interned(g));
    for (const auto& [name, members] : presets) {
      lens::GroupSet set;
      for (const std::string& m : members) {
        lens::SpanGroup id(0);
        if (!c.find_group(m, &id)) {
          std::string message = "lens: preset '";
          message.append(name).append("' names '").append(m).append("', which is not a group of the catalogue");
          throw py::value_error(message);
        }
        set = set | lens::GroupSet{id};
      }
      c.set_preset(interned(name), set);
    }
    return c;
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  } catch (const std::length_error& e) {
    throw py::value_error(e.what());
  }
}

// The checks of is_span_group_enabled read names through this table: {name: id} of the catalogue in force.
void publish_group_ids(const lens::Catalogue& c) {
  py::dict ids;
  for (std::size_t i = 0; i < c.group_count(); ++i)
    ids[py::str(std::string(c.group_name(lens::SpanGroup(static_cast<std::uint8_t>(i)))))] = py::int_(i);
  set_group_ids(ids.ptr());
}

void bind_groups(py::module_& m) {
  m.def("base_catalogue", [] { return catalogue_description(lens::base_catalogue()); });
  m.def("megatron_catalogue", [] { return catalogue_description(lens::megatron::catalogue()); });
  m.def(
      "resolve",
      [](const std::vector<std::string>& groups, const PresetList& presets, const std::string& spec,
         const std::string& source) {
        lens::Catalogue c = make_catalogue(groups, presets);
        return group_names(c, lens::resolve(c, spec, source));
      },
      py::arg("groups"), py::arg("presets"), py::arg("spec"), py::arg("source"));
  m.def(
      "use_catalogue",
      [](const std::vector<std::string>& groups, const PresetList& presets) {
        publish_group_ids(make_catalogue(groups, presets));
      },
      "Makes is_span_group_enabled read group names through this catalogue.");
  m.def("enabled_span_groups", [] { return lens::enabled_span_groups().bits(); });
  m.def(
      "take_span_group_request",
      [] {
        const auto words = lens::take_span_group_request().encode();
        return std::vector<std::int64_t>(words.begin(), words.end());
      },
      "Rank 0: the span-group change lens ctl asked for, as 4 non-negative int64 words to all-reduce with MAX "
      "(zeros: none).");
  m.def(
      "at_iteration_boundary",
      [](std::int64_t iteration, const std::vector<std::int64_t>& agreed) -> py::object {
        if (agreed.size() != lens::SpanGroupRequest::kWords)
          throw py::value_error("at_iteration_boundary: the agreed request is 4 words (take_span_group_request's)");
        std::array<std::int64_t, lens::SpanGroupRequest::kWords> words{};
        std::copy(agreed.begin(), agreed.end(), words.begin());
        const auto change = lens::at_iteration_boundary(iteration, lens::SpanGroupRequest::decode(words));
        if (!change) return py::none();
        py::dict d;
        d["iteration"] = change->iteration;
        d["span_groups"] = change->groups_text;
        d["for_iterations"] = change->iterations;
        d["restored"] = change->restored;
        return py::object(std::move(d));
      },
      py::arg("iteration"), py::arg("agreed"),
      "Every rank, before `iteration`: applies the agreed change (or restores after --for N); a dict of what "
      "changed (iteration, span_groups, for_iterations, restored), or None.");
  m.def("set_enabled_span_groups",
        [](std::uint64_t bits) { return lens::set_enabled_span_groups(lens::GroupSet(bits)).bits(); });
}

}  // namespace lens_python
