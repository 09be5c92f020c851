// The areas of lens._native bound with pybind11, one bind_<area>(m) each in bind_<area>.cc, which module.cc's
// module body lists (each includes pybind11's functional and stl casters, as every TU binding these types must); and
// the helpers more than one area uses: the catalogue's (bind_groups.cc) and resource attributes from Python
// (bind_setup.cc).
//
//   PYBIND11_MODULE(_native, m) { bind_groups(m); bind_context(m); ... }
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ids.h"
#include "lens/groups.h"
#include "lens/telemetry.h"

namespace lens_python {

void bind_groups(pybind11::module_& m);
void bind_context(pybind11::module_& m);
void bind_spans(pybind11::module_& m);
void bind_configuration(pybind11::module_& m);
void bind_setup(pybind11::module_& m);
void bind_strategies(pybind11::module_& m);
void bind_metrics(pybind11::module_& m);
void bind_logs(pybind11::module_& m);
void bind_identity(pybind11::module_& m);
void bind_stragglers(pybind11::module_& m);
void bind_device(pybind11::module_& m);

// A catalogue's presets as Python gives them: (name, [member group, ...]).
using PresetList = std::vector<std::pair<std::string, std::vector<std::string>>>;
// A catalogue of `groups` and `presets` from Python; ValueError for a preset that names no group of it.
lens::Catalogue make_catalogue(const std::vector<std::string>& groups, const PresetList& presets);
// The names of the groups of `set` in catalogue `c`, in the catalogue's order.
std::vector<std::string> group_names(const lens::Catalogue& c, lens::GroupSet set);
// Makes `c` the catalogue whose names is_span_group_enabled reads (its {name: id} table).
void publish_group_ids(const lens::Catalogue& c);

// Resource attributes from a Python mapping (None: none): bools, ints and floats as they are, anything else as its
// str; a None value is left out.
lens::ResourceAttributes resource_from(const pybind11::object& mapping);

// Ids as Python ints (OpenTelemetry's form) and as hex: error_already_set for an int that does not fit.
inline pybind11::int_ id_to_int(const std::uint8_t* bytes, std::size_t n) {
  PyObject* id = int_of_id(bytes, n);
  if (id == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::int_>(id);
}

template <std::size_t N>
std::array<std::uint8_t, N> id_from_int(const pybind11::int_& value) {
  std::array<std::uint8_t, N> out{};
  if (!id_of_int(value.ptr(), out.data(), N)) throw pybind11::error_already_set();
  return out;
}

inline std::string hex_of(const std::uint8_t* bytes, std::size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (std::size_t i = 0; i < n; ++i) hex += {kHex[bytes[i] >> 4], kHex[bytes[i] & 15]};
  return hex;
}

}  // namespace lens_python
