// Rank and sampling strategies registered from Python, and the samplers Python composes.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "bindings.h"
#include "interpreter.h"
#include "lens/ranks.h"
#include "lens/sampling.h"

namespace py = pybind11;

namespace lens_python {

namespace {

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

}  // namespace

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

}  // namespace lens_python
