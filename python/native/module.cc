// lens._native: the C++ library as the Python package sees it. The span path is hand-written (spans.cc); the
// rest (configuration, setup, context, metrics, logs, the worker bootstrap, the Megatron helpers) is bound with
// pybind11, one bind_<area>(m) per area (groups, context, spans, configuration, setup, strategies, metrics, logs,
// identity), which the module body lists. Everything here runs with the GIL held, except force_flush and shutdown
// (they release it while they wait) and what lens's background thread calls (strategies, sinks), which takes it.
// The package's Python modules (python/lens/*.py) give it NeMo Lens's surface; nothing here is meant to be
// imported directly.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "attributes.h"
#include "context_conversion.h"
#include "ids.h"
#include "interpreter.h"
#include "lens/config.h"
#include "lens/context.h"
#include "lens/control.h"
#include "lens/device.h"
#include "lens/groups.h"
#include "lens/log.h"
#include "lens/megatron.h"
#include "lens/metrics.h"
#include "lens/ranks.h"
#include "lens/resource.h"
#include "lens/sampling.h"
#include "lens/span.h"
#include "lens/straggler.h"
#include "lens/telemetry.h"
#include "lens/version.h"
#include "lens/worker.h"
#include "otel_context.h"
#include "otel_tracer.h"
#include "phases.h"
#include "sdk_spans.h"
#include "spans.h"

namespace py = pybind11;

namespace lens_python {
namespace {

// --- enums as the environment spells them -----------------------------------------------------------------

template <typename E>
using EnumNames = std::initializer_list<std::pair<E, const char*>>;

template <typename E>
std::string name_of(E value, EnumNames<E> names) {
  for (const auto& [v, n] : names)
    if (v == value) return n;
  return "unknown";
}

template <typename E>
E parse_enum(const std::string& text, EnumNames<E> names, const char* field) {
  std::string valid;
  for (const auto& [v, n] : names) {
    if (text == n) return v;
    valid += valid.empty() ? n : std::string(", ") + n;
  }
  throw py::value_error(std::string("lens: ") + field + "='" + text + "' is invalid: expected one of " + valid);
}

const EnumNames<lens::Exporter> kExporters{
    {lens::Exporter::kOtlp, "otlp"}, {lens::Exporter::kConsole, "console"}, {lens::Exporter::kFile, "file"}};
const EnumNames<lens::TraceLayout> kLayouts{{lens::TraceLayout::kSegment, "segment"},
                                            {lens::TraceLayout::kStep, "step"}};
const EnumNames<lens::DeviceTiming> kDeviceTimings{{lens::DeviceTiming::kNone, "none"},
                                                   {lens::DeviceTiming::kCuda, "cuda"}};
const EnumNames<lens::SpanNaming> kNamings{{lens::SpanNaming::kDocumented, "documented"},
                                           {lens::SpanNaming::kMegatron, "megatron"}};
const EnumNames<lens::SignalExporter> kSignalExporters{{lens::SignalExporter::kFollow, ""},
                                                       {lens::SignalExporter::kOtlp, "otlp"},
                                                       {lens::SignalExporter::kConsole, "console"},
                                                       {lens::SignalExporter::kNone, "none"},
                                                       {lens::SignalExporter::kPrometheus, "prometheus"}};
const EnumNames<lens::Temporality> kTemporalities{{lens::Temporality::kCumulative, "cumulative"},
                                                  {lens::Temporality::kDelta, "delta"},
                                                  {lens::Temporality::kLowMemory, "lowmemory"}};
const EnumNames<lens::Severity> kSeverities{{lens::Severity::kTrace, "trace"}, {lens::Severity::kDebug, "debug"},
                                            {lens::Severity::kInfo, "info"},   {lens::Severity::kWarn, "warn"},
                                            {lens::Severity::kError, "error"}, {lens::Severity::kFatal, "fatal"}};

// --- catalogues built from Python classes -------------------------------------------------------------------

// A catalogue keeps its names as views: names that come from Python are kept here for the process's life.
std::string_view interned(const std::string& name) {
  static std::set<std::string, std::less<>> names;
  return *names.insert(name).first;
}

using PresetList = std::vector<std::pair<std::string, std::vector<std::string>>>;

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

std::vector<std::string> group_names(const lens::Catalogue& c, lens::GroupSet set) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < c.group_count(); ++i) {
    lens::SpanGroup g(static_cast<std::uint8_t>(i));
    if (set.contains(g)) out.emplace_back(c.group_name(g));
  }
  return out;
}

py::tuple catalogue_description(const lens::Catalogue& c) {
  std::vector<std::string> groups = group_names(c, c.all());
  PresetList presets;
  for (std::size_t i = 0; i < c.preset_count(); ++i)
    presets.emplace_back(std::string(c.preset(i).name), group_names(c, c.preset(i).groups));
  return py::make_tuple(groups, presets);
}

// The checks of is_span_group_enabled read names through this table: {name: id} of the catalogue in force.
void publish_group_ids(const lens::Catalogue& c) {
  py::dict ids;
  for (std::size_t i = 0; i < c.group_count(); ++i)
    ids[py::str(std::string(c.group_name(lens::SpanGroup(static_cast<std::uint8_t>(i)))))] = py::int_(i);
  set_group_ids(ids.ptr());
}

// --- values ----------------------------------------------------------------------------------------------

// A Python callable as a SetupOptions sink: called on lens's background thread with the GIL taken; what it raises
// is reported once on stderr (the sink's own failures are counted as failed exports either way).
std::function<bool(const std::string&)> json_sink(const py::object& callable) {
  if (callable.is_none()) return {};
  if (!PyCallable_Check(callable.ptr())) throw py::type_error("lens: an exporter sink is a callable");
  auto* kept = new py::object(callable);  // kept for the process's life: the pipeline may outlive the handle
  return [kept](const std::string& json) {
    if (interpreter_ending()) return false;  // a late batch after the interpreter ended
    py::gil_scoped_acquire gil;
    try {
      return py::bool_((*kept)(py::str(json))).cast<bool>();
    } catch (py::error_already_set& e) {
      static std::atomic<bool> told{false};
      if (!told.exchange(true))
        PySys_WriteStderr("lens: an exporter raised (counted as a failed export): %s\n", e.what());
      return false;
    }
  };
}

lens::ResourceAttributes resource_from(const py::object& mapping) {
  lens::ResourceAttributes out;
  if (mapping.is_none()) return out;
  for (auto item : py::cast<py::dict>(mapping)) {
    std::string key = py::str(item.first);
    py::handle v = item.second;
    if (v.is_none()) continue;
    if (py::isinstance<py::bool_>(v))
      out.emplace_back(key, v.cast<bool>());
    else if (py::isinstance<py::int_>(v))
      out.emplace_back(key, v.cast<std::int64_t>());
    else if (py::isinstance<py::float_>(v))
      out.emplace_back(key, v.cast<double>());
    else
      out.emplace_back(key, std::string(py::str(v)));
  }
  return out;
}

py::dict resource_to_dict(const lens::ResourceAttributes& attributes) {
  py::dict out;
  for (const auto& attribute : attributes) {  // no structured binding: clang 14 cannot capture one in the lambda
    const std::string& key = attribute.first;
    std::visit([&](const auto& v) { out[py::str(key)] = py::cast(v); }, attribute.second);
  }
  return out;
}

py::int_ id_to_int(const std::uint8_t* bytes, std::size_t n) {
  PyObject* id = int_of_id(bytes, n);
  if (id == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::int_>(id);
}

template <std::size_t N>
std::array<std::uint8_t, N> id_from_int(const py::int_& value) {
  std::array<std::uint8_t, N> out{};
  if (!id_of_int(value.ptr(), out.data(), N)) throw py::error_already_set();
  return out;
}

std::string hex_of(const std::uint8_t* bytes, std::size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (std::size_t i = 0; i < n; ++i) hex += {kHex[bytes[i] >> 4], kHex[bytes[i] & 15]};
  return hex;
}

// --- samplers that Python composes --------------------------------------------------------------------------

// A sampler Python holds (shared) inside one lens owns (unique).
class SharedSampler final : public lens::Sampler {
 public:
  explicit SharedSampler(std::shared_ptr<lens::Sampler> inner) : inner_(std::move(inner)) {}
  lens::SamplingDecision should_sample(const lens::SamplingParameters& p) const noexcept override {
    return inner_->should_sample(p);
  }
  std::string description() const override { return inner_->description(); }

 private:
  std::shared_ptr<lens::Sampler> inner_;
};

std::unique_ptr<lens::Sampler> owned(const std::shared_ptr<lens::Sampler>& s) {
  if (!s) throw py::type_error("lens: a sampling strategy returns a lens sampler (lens.sampling.*)");
  return std::make_unique<SharedSampler>(s);
}

struct PySamplingInput {
  lens::RankInfo ranks;
  double export_sample_rate;
  std::shared_ptr<lens::Sampler> sdk_sampler;
};

// --- metrics ---------------------------------------------------------------------------------------------

struct PyInstrument {
  lens::internal::Instrument* instrument;
  lens::InstrumentKind kind;
  std::string name;

  void measure(double value, const py::object& attributes) const {
    if (!lens::internal::recording()) return;
    if (kind == lens::InstrumentKind::kCounter && value < 0) return;  // a counter only goes up
    const auto iv = static_cast<std::int64_t>(value);
    if (attributes.is_none()) {
      if (kind == lens::InstrumentKind::kCounter || kind == lens::InstrumentKind::kUpDownCounter)
        lens::internal::add(instrument, value);
      else
        lens::internal::record(instrument, value);
      return;
    }
    AttributeBuffer buffer;
    buffer.add_dict(attributes.ptr());
    lens::internal::add(instrument, value, iv, std::span<const lens::Attribute>(buffer.attributes()));
  }
};

}  // namespace

PyObject* context_to_python(const lens::SpanContext& context) {
  try {
    return py::cast(context).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  }
}

namespace {

// OpenTelemetry's SpanContext (or anything with its trace_id, span_id, trace_flags and is_remote) as lens's.
bool context_of_otel_shape(PyObject* object, lens::SpanContext* out) {
  py::handle o(object);
  if (!py::hasattr(o, "trace_id") || !py::hasattr(o, "span_id") || !py::hasattr(o, "trace_flags")) return false;
  py::object trace_id = o.attr("trace_id"), span_id = o.attr("span_id");
  if (!id_of_int(trace_id.ptr(), out->trace_id.bytes.data(), 16) ||
      !id_of_int(span_id.ptr(), out->span_id.bytes.data(), 8)) {
    PyErr_Clear();
    return false;
  }
  out->trace_flags = static_cast<std::uint8_t>(py::int_(o.attr("trace_flags")).cast<unsigned>() & 0xFFU);
  out->is_remote = py::hasattr(o, "is_remote") && py::bool_(o.attr("is_remote"));
  return true;
}

}  // namespace

bool context_from_python(PyObject* object, lens::SpanContext* out) {
  // None (what extract() gives for a header it cannot read) is a reference pybind11 cannot bind: it throws
  // reference_cast_error, which is not a cast_error. Every failure here is the caller's TypeError, never an
  // exception out of a C function (std::terminate).
  try {
    if (object != Py_None) {
      if (py::isinstance<lens::SpanContext>(py::handle(object))) {
        *out = py::cast<lens::SpanContext>(py::handle(object));
        return true;
      }
      if (context_of_otel_shape(object, out)) return true;
    }
  } catch (const std::exception&) {
    PyErr_Clear();
  }
  PyErr_Format(PyExc_TypeError, "lens: expected a SpanContext (lens's or OpenTelemetry's), got %s",
               Py_TYPE(object)->tp_name);
  return false;
}

namespace {

// A context push as one Python int: where it went, and in the low bits the stack's depth after it (at most
// ThreadState's 128 entries). A user-space address has 47 bits, so the token fits 64.
constexpr unsigned kContextTokenDepthBits = 8;
constexpr std::uint64_t kContextTokenDepthMask = (std::uint64_t{1} << kContextTokenDepthBits) - 1;

std::uint64_t context_token(lens::internal::ThreadState* pushed_to) {
  if (pushed_to == nullptr) return 0;
  return (static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pushed_to)) << kContextTokenDepthBits) |
         lens::internal::context_depth(pushed_to);
}

// Groups.
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

// Stragglers (lens/straggler.h): the window and the scoring of gathered summaries (step_phase, on every forward
// and receive, is in phases.cc).
// One rank's summary from Python: 7 integers (a tensor's tolist()); anything else (a float that is not a whole
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
    r["scored"] = v.scored;
    r["flagged"] = v.flagged;
    r["score"] = v.score;
    r["compute_ms"] = v.compute_ms;
    r["wait_ms"] = v.wait_ms;
    r["peer_compute_ms"] = v.peer_compute_ms;
    r["peer_wait_ms"] = v.peer_wait_ms;
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

void bind_stragglers(py::module_& m) {
  m.def("end_step", &lens::end_step, py::arg("iteration"),
        "Every rank, once per step, after its last phase: closes the step into the window.");
  m.def("straggler_summary_due", &lens::straggler_summary_due, py::arg("iteration"),
        "Whether the step just ended closes a window (every STRAGGLER_INTERVAL steps).");
  m.def(
      "take_straggler_summary",
      [](std::int64_t iteration, int stage) {
        const auto words = lens::take_straggler_summary(iteration, stage).encode();
        return std::vector<std::int64_t>(words.begin(), words.end());
      },
      py::arg("iteration"), py::arg("stage"),
      "This rank's window as 7 non-negative int64 words: put them in its slot of a world_size x 7 tensor of zeros "
      "and all-reduce with SUM.");
  m.def(
      "score_stragglers",
      [](std::int64_t iteration, const py::sequence& by_rank) {
        std::vector<lens::StragglerSummary> summaries;
        summaries.reserve(py::len(by_rank));
        for (const py::handle& entry : by_rank) summaries.push_back(summary_from(entry));
        return lens::score_stragglers(iteration, summaries);
      },
      py::arg("iteration"), py::arg("by_rank"),
      "The lowest exporting rank: hands the gathered summaries (one 7-word list per rank) to lens's scoring thread, "
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

// The stream device-timed spans record on (lens/device.h): a torch.cuda.Stream (its .cuda_stream), a raw cudaStream_t
// as an int, or None for the legacy default stream.
void* stream_handle(const py::object& stream) {
  if (stream.is_none()) return nullptr;
  py::object raw = py::hasattr(stream, "cuda_stream") ? stream.attr("cuda_stream") : stream;
  if (py::isinstance<py::int_>(raw) && !py::isinstance<py::bool_>(raw)) {
    const auto value = raw.cast<long long>();
    // A cudaStream_t handed over from Python is an integer (torch.cuda.Stream.cuda_stream).
    if (value >= 0)
      return reinterpret_cast<void*>(static_cast<std::uintptr_t>(value));  // NOLINT(performance-no-int-to-ptr)
  }
  throw py::type_error(
      "lens.set_device_stream takes a torch.cuda.Stream (anything with .cuda_stream), a raw "
      "cudaStream_t as a non-negative int, or None; got " +
      std::string(py::str(py::type::of(stream).attr("__name__"))));
}

void bind_device(py::module_& m) {
  m.def(
      "set_device_stream", [](const py::object& stream) { lens::set_device_stream(stream_handle(stream)); },
      py::arg("stream"),
      "The calling thread's CUDA stream for device-timed spans (DEVICE_TIMING=cuda): a torch.cuda.Stream, a raw "
      "handle as an int, or None for the legacy default stream.");
  m.def(
      "device_stream", [] { return reinterpret_cast<std::uintptr_t>(lens::device_stream()); },
      "The calling thread's stream as set (0: the legacy default stream).");
}

// Context.
void bind_context(py::module_& m) {
  py::class_<lens::SpanContext>(m, "SpanContext", "A span's identity: trace id, span id, flags.")
      .def(py::init([](const py::int_& trace_id, const py::int_& span_id, int trace_flags, bool is_remote) {
             lens::SpanContext c;
             c.trace_id.bytes = id_from_int<16>(trace_id);
             c.span_id.bytes = id_from_int<8>(span_id);
             c.trace_flags = static_cast<std::uint8_t>(trace_flags);
             c.is_remote = is_remote;
             return c;
           }),
           py::arg("trace_id"), py::arg("span_id"), py::arg("trace_flags") = 1, py::arg("is_remote") = true)
      .def_property_readonly("trace_id",
                             [](const lens::SpanContext& c) { return id_to_int(c.trace_id.bytes.data(), 16); })
      .def_property_readonly("span_id", [](const lens::SpanContext& c) { return id_to_int(c.span_id.bytes.data(), 8); })
      .def_property_readonly("trace_id_hex",
                             [](const lens::SpanContext& c) { return hex_of(c.trace_id.bytes.data(), 16); })
      .def_property_readonly("span_id_hex",
                             [](const lens::SpanContext& c) { return hex_of(c.span_id.bytes.data(), 8); })
      .def_readonly("trace_flags", &lens::SpanContext::trace_flags)
      .def_readonly("is_remote", &lens::SpanContext::is_remote)
      .def_property_readonly("is_valid", &lens::SpanContext::is_valid)
      .def_property_readonly("is_sampled", &lens::SpanContext::is_sampled)
      .def_property_readonly(
          "trace_state", [](const lens::SpanContext&) { return py::none(); },
          "None: lens keeps no tracestate on a span (OpenTelemetry's attribute, for its propagators).")
      .def(
          "__eq__",
          [](const lens::SpanContext& a, const lens::SpanContext& b) {
            return a.trace_id == b.trace_id && a.span_id == b.span_id && a.trace_flags == b.trace_flags;
          },
          py::is_operator())
      .def("__hash__",
           [](const lens::SpanContext& c) {
             return py::hash(py::make_tuple(id_to_int(c.trace_id.bytes.data(), 16),
                                            id_to_int(c.span_id.bytes.data(), 8), c.trace_flags));
           })
      .def("__repr__", [](const lens::SpanContext& c) {
        return "SpanContext(trace_id=0x" + hex_of(c.trace_id.bytes.data(), 16) + ", span_id=0x" +
               hex_of(c.span_id.bytes.data(), 8) + ", trace_flags=" + std::to_string(c.trace_flags) +
               (c.is_remote ? ", remote)" : ")");
      });
  m.def("current_context", &lens::current_context, "The calling thread's current span context.");
  m.def("to_traceparent", &lens::to_traceparent);
  m.def("from_traceparent", &lens::from_traceparent);
  m.def("normalize_tracestate", &lens::normalize_tracestate);
  m.def("to_bytes", [](const lens::SpanContext& c) {
    lens::BinaryContext b = lens::to_binary(c);
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  });
  m.def("from_bytes", [](const py::bytes& data) -> std::optional<lens::SpanContext> {
    std::string s = data;
    lens::BinaryContext b{};
    if (s.size() != b.size()) return std::nullopt;
    std::copy(s.begin(), s.end(), b.begin());
    return lens::from_binary(b);
  });
  m.def("step_trace_id", [](const std::string& run_id, std::int64_t iteration) {
    lens::TraceId id = lens::step_trace_id(run_id, iteration);
    return id_to_int(id.bytes.data(), 16);
  });
}

// Spans (the general form; managed_span and trace_fn are the fast ones).
void bind_spans(py::module_& m) {
  m.def(
      "start_span",
      [](const py::str& name, const py::object& group, const py::object& attributes,
         const std::vector<std::optional<lens::SpanContext>>& links, bool root, const std::optional<py::int_>& trace_id,
         const std::optional<lens::SpanContext>& parent, bool current, bool record_exception, bool start_now, int kind,
         std::uint64_t start_time, bool redact) {
        SpanRequest r;
        r.redact = redact;
        if (kind < static_cast<int>(lens::SpanKind::kInternal) || kind > static_cast<int>(lens::SpanKind::kConsumer))
          throw py::value_error("start_span: kind is 1 (internal) to 5 (consumer), as OTLP numbers them");
        r.kind = static_cast<lens::SpanKind>(kind);
        r.start_unix_nanos = start_time;
        if (!group.is_none() && !group_is_enabled(group.ptr(), &r.group_id))
          return py::reinterpret_steal<py::object>(null_span());
        r.ungated = group.is_none();
        r.name = name.ptr();
        r.attributes = attributes.ptr();
        r.make_current = current;
        r.record_exception = record_exception;
        r.root = root;
        for (const auto& link : links)
          if (link) r.links.push_back(*link);
        r.parent = parent;
        r.start_now = start_now;
        if (trace_id) r.trace_id = lens::TraceId{id_from_int<16>(*trace_id)};
        PyObject* s = new_span(r);
        if (s == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(s);
      },
      py::arg("name"), py::arg("group") = py::none(), py::arg("attributes") = py::none(),
      py::arg("links") = std::vector<std::optional<lens::SpanContext>>{}, py::arg("root") = false,
      py::arg("trace_id") = py::none(), py::arg("parent") = py::none(), py::arg("current") = true,
      py::arg("record_exception") = true, py::arg("start_now") = false, py::arg("kind") = 1, py::arg("start_time") = 0,
      py::arg("redact") = false);
  m.def(
      "current_span", [] { return py::reinterpret_steal<py::object>(current_span_view()); },
      "The thread's current span for OpenTelemetry's context: a Span writing to it, a SpanContext, or None "
      "(nothing, or what OpenTelemetry attached itself).");
  // OpenTelemetry's context.attach/detach on lens's context stack (lens.otel): a push returns a token of where it
  // went and how deep the stack was then, and a pop is pop_attached_context's (never another thread's entry).
  m.def(
      "push_context",
      [](const lens::SpanContext& context) {
        return context_token(lens::internal::push_context(context, nullptr, true));
      },
      "Makes `context` the thread's current one (an invalid one: no parent); returns a token for pop_context.");
  m.def(
      "pop_context",
      [](std::uint64_t token) {
        const auto depth = static_cast<std::uint32_t>(token & kContextTokenDepthMask);
        auto* pushed_to = reinterpret_cast<lens::internal::ThreadState*>(  // NOLINT(performance-no-int-to-ptr)
            static_cast<std::uintptr_t>(token >> kContextTokenDepthBits));
        return static_cast<int>(lens::internal::pop_attached_context(pushed_to, depth));
      },
      "Undoes the push_context that returned `token` and the attached contexts above it: 0 popped, 1 popped "
      "already, 2 another thread's, 3 under a span still open (nothing popped but for 0).");
}

// Configuration.
// A rate or ratio set from Python: a number in [0, 1]. NaN passed as set, and every comparison with it failed: at
// export_sample_rate = nan no rank exported, and nothing said why.
double rate_in_unit_interval(double value, const char* name) {
  if (!(value >= 0.0 && value <= 1.0)) {
    char text[96];
    std::snprintf(text, sizeof text, "%s must be in [0.0, 1.0], got %g", name, value);
    throw lens::ConfigError(text);
  }
  return value;
}

void bind_configuration(py::module_& m) {
  py::class_<lens::Config>(m, "Config", py::dynamic_attr())
      .def(py::init<>())
      .def("_load_env",
           [](lens::Config& c, const std::string& prefix, const std::string& fallback,
              const std::string& default_service_name, const std::vector<std::string>& groups,
              const PresetList& presets) {
             c = lens::Config::from_env(prefix, fallback, default_service_name, make_catalogue(groups, presets));
           })
      .def("_use_catalogue", [](lens::Config& c, const std::vector<std::string>& groups,
                                const PresetList& presets) { c.catalogue = make_catalogue(groups, presets); })
      .def("_copy", [](const lens::Config& c, lens::Config& into) { into = c; })
      .def("apply_cli", &lens::Config::apply_cli, py::arg("otel_enabled"), py::arg("otel_service_name") = "",
           py::arg("otel_span_groups") = "")
      .def("summary", &lens::Config::summary)
      .def_property_readonly("active", &lens::Config::active)
      .def_property_readonly("catalogue_groups",
                             [](const lens::Config& c) { return group_names(c.catalogue, c.catalogue.all()); })
      .def_readwrite("enabled", &lens::Config::enabled)
      .def_readwrite("service_name", &lens::Config::service_name)
      .def_readwrite("span_groups", &lens::Config::span_groups)
      .def_readwrite("span_groups_source", &lens::Config::span_groups_source)
      .def_readwrite("rank_strategy", &lens::Config::rank_strategy)
      .def_readwrite("export_rank", &lens::Config::export_rank)
      .def_property(
          "export_sample_rate", [](const lens::Config& c) { return c.export_sample_rate; },
          [](lens::Config& c, double rate) {
            c.export_sample_rate = rate_in_unit_interval(rate, "export_sample_rate");
          })
      .def_readwrite("sampling_strategy", &lens::Config::sampling_strategy)
      .def_readwrite("traces_enabled", &lens::Config::traces_enabled)
      .def_readwrite("metrics_enabled", &lens::Config::metrics_enabled)
      .def_readwrite("logs_enabled", &lens::Config::logs_enabled)
      .def_readwrite("file_dir", &lens::Config::file_dir)
      .def_readwrite("run_id", &lens::Config::run_id)
      .def_readwrite("user_id", &lens::Config::user_id)
      .def_readwrite("sdk_disabled", &lens::Config::sdk_disabled)
      .def_property(
          "traces_sampler_ratio", [](const lens::Config& c) { return c.traces_sampler_ratio; },
          [](lens::Config& c, double ratio) {
            c.traces_sampler_ratio = rate_in_unit_interval(ratio, "traces_sampler_ratio");
          })
      .def_readwrite("metric_export_interval_ms", &lens::Config::metric_export_interval_ms)
      .def_readwrite("metric_export_timeout_ms", &lens::Config::metric_export_timeout_ms)
      .def_readwrite("resource_attributes", &lens::Config::resource_attributes)
      .def_readwrite("propagate_trace_context", &lens::Config::propagate_trace_context)
      .def_readwrite("prometheus_host", &lens::Config::prometheus_host)
      .def_readwrite("prometheus_port", &lens::Config::prometheus_port)
      .def_readwrite("straggler_interval", &lens::Config::straggler_interval)
      .def_readwrite("device_span_groups", &lens::Config::device_span_groups)
      .def_property(
          "device_timing", [](const lens::Config& c) { return name_of(c.device_timing, kDeviceTimings); },
          [](lens::Config& c, const std::string& v) {
            c.device_timing = parse_enum(v, kDeviceTimings, "device_timing");
          })
      .def_property_readonly("traces_sampler",
                             [](const lens::Config& c) { return std::string(lens::to_string(c.traces_sampler)); })
      .def_property_readonly("otlp_traces_endpoint", [](const lens::Config& c) { return c.otlp_traces.endpoint; })
      .def_property_readonly("otlp_traces_protocol",
                             [](const lens::Config& c) { return std::string(lens::to_string(c.otlp_traces.protocol)); })
      .def_property_readonly("span_batch",
                             [](const lens::Config& c) {
                               return py::make_tuple(c.span_batch.schedule_delay_ms, c.span_batch.export_timeout_ms,
                                                     c.span_batch.max_queue_size, c.span_batch.max_export_batch_size);
                             })
      .def_property(
          "exporter", [](const lens::Config& c) { return name_of(c.exporter, kExporters); },
          [](lens::Config& c, const std::string& v) { c.exporter = parse_enum(v, kExporters, "exporter"); })
      .def_property(
          "trace_layout", [](const lens::Config& c) { return name_of(c.trace_layout, kLayouts); },
          [](lens::Config& c, const std::string& v) { c.trace_layout = parse_enum(v, kLayouts, "trace_layout"); })
      .def_property(
          "span_names", [](const lens::Config& c) { return name_of(c.span_names, kNamings); },
          [](lens::Config& c, const std::string& v) { c.span_names = parse_enum(v, kNamings, "span_names"); })
      .def_property(
          "min_log_severity", [](const lens::Config& c) { return name_of(c.min_log_severity, kSeverities); },
          [](lens::Config& c, const std::string& v) {
            c.min_log_severity = parse_enum(v, kSeverities, "min_log_severity");
          })
      .def_property(
          "metrics_temporality", [](const lens::Config& c) { return name_of(c.metrics_temporality, kTemporalities); },
          [](lens::Config& c, const std::string& v) {
            c.metrics_temporality = parse_enum(v, kTemporalities, "metrics_temporality");
          })
      .def_property_readonly("traces_exporter",
                             [](const lens::Config& c) { return name_of(c.traces_exporter, kSignalExporters); })
      .def_property_readonly("metrics_exporter",
                             [](const lens::Config& c) { return name_of(c.metrics_exporter, kSignalExporters); })
      .def_property_readonly("logs_exporter",
                             [](const lens::Config& c) { return name_of(c.logs_exporter, kSignalExporters); });
}

// Setup.
void bind_setup(py::module_& m) {
  py::class_<lens::Telemetry>(m, "Telemetry")
      .def(py::init<>())
      .def_property_readonly("is_exporting", &lens::Telemetry::is_exporting)
      .def(
          "force_flush",
          [](lens::Telemetry& t, std::int64_t ms) { return t.force_flush(std::chrono::milliseconds(ms)); },
          py::arg("timeout_millis") = 5000, py::call_guard<py::gil_scoped_release>())
      .def(
          "shutdown", [](lens::Telemetry& t, std::int64_t ms) { return t.shutdown(std::chrono::milliseconds(ms)); },
          py::arg("timeout_millis") = 5000, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("run_id", &lens::Telemetry::run_id)
      .def_property_readonly("config", &lens::Telemetry::config)
      .def_property_readonly("rank", [](const lens::Telemetry& t) { return t.ranks().rank; })
      .def_property_readonly("world_size", [](const lens::Telemetry& t) { return t.ranks().world_size; })
      .def_property_readonly(
          "resolved_span_groups",
          [](const lens::Telemetry& t) { return group_names(t.config().catalogue, t.resolved_span_groups()); })
      .def("span_stats",
           [](const lens::Telemetry& t) {
             lens::SpanStats s = t.span_stats();
             py::dict d;
             d["produced"] = s.produced;
             d["exported"] = s.exported;
             d["queued"] = s.queued;
             d["dropped"] = s.dropped();
             d["dropped_queue_full"] = s.dropped_queue_full;
             d["dropped_no_slot"] = s.dropped_no_slot;
             d["dropped_after_shutdown"] = s.dropped_after_shutdown;
             d["dropped_export_failed"] = s.dropped_export_failed;
             d["rejected_by_collector"] = s.rejected_by_collector;
             d["sampled_out"] = s.sampled_out;
             return d;
           })
      .def("log_stats", [](const lens::Telemetry& t) {
        lens::LogStats s = t.log_stats();
        py::dict d;
        d["produced"] = s.produced;
        d["exported"] = s.exported;
        d["dropped"] = s.dropped();
        return d;
      });
  m.def(
      "setup",
      [](const lens::Config& config, std::optional<int> rank, std::optional<int> world_size,
         std::optional<int> local_rank, const py::object& resource, bool reinit, const py::object& span_sink,
         const py::object& metric_sink) {
        lens::SetupOptions o;
        o.span_batch_sink = sdk_span_sink(span_sink.ptr());
        o.metric_sink = json_sink(metric_sink);
        o.rank = rank;
        o.world_size = world_size;
        o.local_rank = local_rank;
        o.resource_attributes = resource_from(resource);
        o.reinit = reinit;
        lens::Telemetry t = lens::setup_telemetry(config, std::move(o));
        publish_group_ids(config.catalogue);
        return t;
      },
      py::arg("config"), py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      py::arg("local_rank") = py::none(), py::arg("resource_attributes") = py::none(), py::arg("reinit") = false,
      py::arg("span_sink") = py::none(), py::arg("metric_sink") = py::none());
}

// Ranks and sampling strategies.
void bind_strategies(py::module_& m) {
  py::class_<lens::RankStrategyInput>(m, "RankStrategyInput")
      .def_property_readonly("rank", [](const lens::RankStrategyInput& i) { return i.ranks.rank; })
      .def_property_readonly("world_size", [](const lens::RankStrategyInput& i) { return i.ranks.world_size; })
      .def_property_readonly("local_rank", [](const lens::RankStrategyInput& i) { return i.ranks.local_rank; })
      .def_readonly("export_rank", &lens::RankStrategyInput::export_rank)
      .def_readonly("export_sample_rate", &lens::RankStrategyInput::export_sample_rate);
  m.def(
      "register_rank_strategy",
      [](std::string name, const py::function& fn, bool allow_override) {
        auto* kept = new py::function(fn);  // kept for the process's life: strategies outlive the interpreter
        lens::register_rank_strategy(
            std::move(name),
            [kept](const lens::RankStrategyInput& in) {
              py::gil_scoped_acquire gil;
              return py::bool_((*kept)(in)).cast<bool>();
            },
            allow_override);
      },
      py::arg("name"), py::arg("strategy"), py::arg("allow_override") = false);
  m.def("unregister_rank_strategy", &lens::unregister_rank_strategy);
  m.def("rank_strategy_names", &lens::rank_strategy_names);
  m.def(
      "detect_rank_info",
      [](std::optional<int> rank, std::optional<int> world, std::optional<int> local) {
        lens::RankInfo r = lens::detect_rank_info(rank, world, local);
        return py::make_tuple(r.rank, r.world_size, r.local_rank);
      },
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(), py::arg("local_rank") = py::none());
  m.def("sampled_rank_score", &lens::sampled_rank_score);
  m.def(
      "rank_exports",
      [](const std::string& name, int rank, int world_size, long long export_rank, double export_sample_rate) {
        lens::RankStrategyInput in;
        in.ranks = lens::detect_rank_info(rank, world_size, std::nullopt);  // the local rank from the launcher
        in.export_rank = export_rank;
        in.export_sample_rate = export_sample_rate;
        return lens::rank_exports(name, in);
      },
      "Whether the named rank strategy exports `rank` of `world_size` (ConfigError: an unknown name).");

  py::class_<lens::Sampler, std::shared_ptr<lens::Sampler>>(m, "Sampler")
      .def("description", &lens::Sampler::description)
      .def("__repr__", [](const lens::Sampler& s) { return "<lens sampler " + s.description() + ">"; });
  m.def("always_on_sampler", [] { return std::shared_ptr<lens::Sampler>(lens::make_always_on_sampler()); });
  m.def("always_off_sampler", [] { return std::shared_ptr<lens::Sampler>(lens::make_always_off_sampler()); });
  m.def("trace_id_ratio_sampler", [](double ratio) {
    try {
      return std::shared_ptr<lens::Sampler>(lens::make_trace_id_ratio_sampler(ratio));
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  });
  m.def("parent_based_sampler", [](const std::shared_ptr<lens::Sampler>& root) {
    return std::shared_ptr<lens::Sampler>(lens::make_parent_based_sampler(owned(root)));
  });
  m.def("rank_gate_sampler", [](bool open, const std::shared_ptr<lens::Sampler>& inner) {
    return std::shared_ptr<lens::Sampler>(lens::make_rank_gate_sampler(open, owned(inner)));
  });
  py::class_<PySamplingInput>(m, "SamplingStrategyInput")
      .def_property_readonly("rank", [](const PySamplingInput& i) { return i.ranks.rank; })
      .def_property_readonly("world_size", [](const PySamplingInput& i) { return i.ranks.world_size; })
      .def_property_readonly("local_rank", [](const PySamplingInput& i) { return i.ranks.local_rank; })
      .def_readonly("export_sample_rate", &PySamplingInput::export_sample_rate)
      .def_readonly("sdk_sampler", &PySamplingInput::sdk_sampler);
  m.def(
      "register_sampling_strategy",
      [](std::string name, const py::function& factory, bool allow_override) {
        auto* kept = new py::function(factory);
        lens::register_sampling_strategy(
            std::move(name),
            [kept](lens::SamplingStrategyInput in) -> std::unique_ptr<lens::Sampler> {
              py::gil_scoped_acquire gil;
              PySamplingInput input{in.ranks, in.export_sample_rate,
                                    std::shared_ptr<lens::Sampler>(std::move(in.sdk_sampler))};
              return owned((*kept)(input).cast<std::shared_ptr<lens::Sampler>>());
            },
            allow_override);
      },
      py::arg("name"), py::arg("factory"), py::arg("allow_override") = false);
  m.def("sampling_strategy_names", &lens::sampling_strategy_names);
}

// Metrics.
void bind_metrics(py::module_& m) {
  py::enum_<lens::InstrumentKind>(m, "InstrumentKind")
      .value("COUNTER", lens::InstrumentKind::kCounter)
      .value("UP_DOWN_COUNTER", lens::InstrumentKind::kUpDownCounter)
      .value("HISTOGRAM", lens::InstrumentKind::kHistogram)
      .value("GAUGE", lens::InstrumentKind::kGauge);
  py::class_<PyInstrument>(m, "Instrument")
      .def_readonly("name", &PyInstrument::name)
      .def("_measure", &PyInstrument::measure, py::arg("amount"), py::arg("attributes") = py::none());
  m.def(
      "instrument",
      [](lens::InstrumentKind kind, const std::string& name, const std::string& unit, const std::string& description,
         std::optional<std::vector<double>> bounds) {
        static std::deque<std::vector<double>> kept_bounds;  // an instrument keeps a view of its bounds
        std::span<const double> b = lens::metrics::kDefaultBounds;
        if (bounds) b = kept_bounds.emplace_back(*bounds);
        try {
          return PyInstrument{lens::internal::find_or_create_instrument(
                                  name, unit, description, kind, false,
                                  kind == lens::InstrumentKind::kHistogram ? b : std::span<const double>{}),
                              kind, name};
        } catch (const std::invalid_argument& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("kind"), py::arg("name"), py::arg("unit") = "", py::arg("description") = "",
      py::arg("bounds") = py::none());
  m.def("record_training_metrics", [](const py::dict& values) {
    lens::megatron::TrainingMetrics t;
    auto take = [&](const char* key, auto& field) {
      if (values.contains(key) && !values[key].is_none())
        field = values[key].cast<typename std::decay_t<decltype(field)>::value_type>();
    };
    take("step_duration_ms", t.step_duration_ms);
    take("loss", t.loss);
    take("throughput_tflops", t.throughput_tflops);
    take("grad_norm", t.grad_norm);
    take("skipped_iters", t.skipped_iters);
    take("learning_rate", t.learning_rate);
    take("tokens_per_sec", t.tokens_per_sec);
    take("memory_allocated_gb", t.memory_allocated_gb);
    take("mfu", t.mfu);
    lens::megatron::record_training_metrics(t);
  });
  m.def(
      "peak_tflops",
      [](const std::string& device_name, bool half_precision) {
        return lens::megatron::peak_tflops(device_name, half_precision);
      },
      py::arg("device_name"), py::arg("half_precision") = true,
      "A GPU's peak dense BF16/FP16 TFLOP/s by NVML's device name (docs/GPU.md), or None.");
}

// Logs.
void bind_logs(py::module_& m) {
  m.def("should_log",
        [](int severity) { return severity >= lens::internal::g_min_log_severity.load(std::memory_order_relaxed); });
  m.def(
      "emit_log",
      [](int severity, const std::string& severity_text, const std::string& body, const py::object& attributes,
         std::int64_t time_ns) {
        AttributeBuffer buffer;
        buffer.add_dict(attributes.ptr());
        auto time = std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(time_ns)));
        lens::internal::emit_log(severity, severity_text, body, buffer.attributes(), time);
      },
      py::arg("severity"), py::arg("severity_text"), py::arg("body"), py::arg("attributes"), py::arg("time_ns"));
}

// Run identity, resource, worker.
void bind_identity(py::module_& m) {
  m.def("resolve_run_id", &lens::resolve_run_id);
  m.def(
      "detect_resource", [] { return resource_to_dict(lens::detect_resource()); },
      "What setup detects about where the process runs (host, process, GPUs, SLURM, Kubernetes), as a dict.");
  m.def("uuid5_url", &lens::uuid5_url);
  m.def("run_uuids", [] {
    lens::RunUuids u = lens::run_uuids();
    py::dict d;
    d["job_uuid"] = u.job_uuid;
    d["run_uuid"] = u.run_uuid;
    d["torchelastic_restart_count"] = u.torchelastic_restart_count;
    return d;
  });
  m.def("megatron_resource_attributes", [](const py::dict& a) {
    lens::megatron::TrainingArgs t;
    auto take = [&](const char* key, auto& field) {
      if (a.contains(key) && !a[key].is_none()) field = a[key].cast<std::decay_t<decltype(field)>>();
    };
    take("local_rank", t.local_rank);
    take("tensor_model_parallel_size", t.tensor_model_parallel_size);
    take("pipeline_model_parallel_size", t.pipeline_model_parallel_size);
    take("data_parallel_size", t.data_parallel_size);
    take("global_batch_size", t.global_batch_size);
    take("seq_length", t.seq_length);
    take("num_layers", t.num_layers);
    take("hidden_size", t.hidden_size);
    take("num_attention_heads", t.num_attention_heads);
    take("train_iters", t.train_iters);
    take("micro_batch_size", t.micro_batch_size);
    take("ckpt_format", t.ckpt_format);
    take("fp16", t.fp16);
    take("bf16", t.bf16);
    return resource_to_dict(lens::megatron::resource_attributes(t));
  });
  m.def("megatron_span_names", [](const std::string& mode) {
    const lens::megatron::SpanNames& n = lens::megatron::span_names(parse_enum(mode, kNamings, "span_names"));
    py::dict d;
    for (const auto& [key, value] : {std::pair{"model_init", n.model_init},
                                     {"load_checkpoint", n.load_checkpoint},
                                     {"load_checkpoint_io_read", n.load_checkpoint_io_read},
                                     {"data_loading", n.data_loading},
                                     {"train_step", n.train_step},
                                     {"forward_backward", n.forward_backward},
                                     {"optimizer_step", n.optimizer_step},
                                     {"save_checkpoint", n.save_checkpoint},
                                     {"save_checkpoint_state_dict", n.save_checkpoint_state_dict},
                                     {"save_checkpoint_io_write", n.save_checkpoint_io_write},
                                     {"num_microbatches_key", n.num_microbatches_key}})
      d[key] = std::string(value.text());
    return d;
  });
  m.def(
      "build_worker_bootstrap",
      [](const lens::Telemetry& t, const py::object& resource, const std::optional<lens::SpanContext>& link) {
        return lens::build_worker_bootstrap(t, resource_from(resource), link ? *link : lens::current_context())
            .serialize();
      },
      py::arg("telemetry"), py::arg("resource_attributes") = py::none(), py::arg("link") = py::none());
  m.def("setup_worker_telemetry", [](const std::string& text, const lens::Config& config) {
    lens::Telemetry t = lens::setup_worker_telemetry(lens::WorkerBootstrap::parse(text), config);
    publish_group_ids(config.catalogue);
    return t;
  });
}

}  // namespace

}  // namespace lens_python

using namespace lens_python;

PYBIND11_MODULE(_native, m) {
  m.doc() = "lens's C++ library for the lens Python package";
  py::register_exception<lens::ConfigError>(m, "ConfigError", PyExc_ValueError);
  if (!add_span_path(m.ptr()) || !add_otel_tracer(m.ptr()) || !add_otel_context(m.ptr())) throw py::error_already_set();
  if (!add_phase_path(m.ptr())) throw py::error_already_set();
  m.attr("LENS_VERSION") = LENS_VERSION_STRING;

  bind_groups(m);
  bind_context(m);
  bind_spans(m);
  bind_configuration(m);
  bind_setup(m);
  bind_strategies(m);
  bind_metrics(m);
  bind_logs(m);
  bind_identity(m);
  bind_stragglers(m);
  bind_device(m);
}
