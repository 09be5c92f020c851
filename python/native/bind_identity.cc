// Run identity, the detected resource, the worker bootstrap.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <variant>

#include "bindings.h"
#include "enum_names.h"
#include "lens/megatron.h"
#include "lens/resource.h"
#include "lens/telemetry.h"
#include "lens/worker.h"

namespace py = pybind11;

namespace lens_python {

namespace {

py::dict resource_to_dict(const lens::ResourceAttributes& attributes) {
  py::dict out;
  for (const auto& attribute : attributes) {  // no structured binding: clang 14 cannot capture one in the lambda
    const std::string& key = attribute.first;
    std::visit([&](const auto& v) { out[py::str(key)] = py::cast(v); }, attribute.second);
  }
  return out;
}

}  // namespace

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
    const char* rank_keys[] = {"tensor_model_parallel_rank", "pipeline_model_parallel_rank", "data_parallel_rank"};
    const auto given = std::count_if(std::begin(rank_keys), std::end(rank_keys),
                                     [&](const char* key) { return a.contains(key) && !a[key].is_none(); });
    if (given == 3) {
      lens::megatron::ParallelRanks ranks;
      take(rank_keys[0], ranks.tensor);
      take(rank_keys[1], ranks.pipeline);
      take(rank_keys[2], ranks.data);
      t.ranks = ranks;
    } else if (given != 0) {
      throw py::value_error(
          "tensor_model_parallel_rank, pipeline_model_parallel_rank and data_parallel_rank go "
          "together: give all three or none");
    }
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

}  // namespace lens_python
