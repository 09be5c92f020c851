// Run identity, uuids, resource precedence, OTEL_RESOURCE_ATTRIBUTES, and GPU identity through a fake NVML
// library loaded with dlopen.
#include "lens/resource.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lens/megatron.h"
#include "lens/span.h"
#include "lens/telemetry.h"
#include "lens/version.h"
#include "resource/gpu_metrics.h"
#include "resource/nvml.h"
#include "resource/resource.h"

namespace lens {
namespace {

using Env = std::map<std::string, std::string>;

internal::EnvLookup lookup(Env env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

const ResourceValue* find(const ResourceAttributes& r, const std::string& key) {
  for (const auto& [k, v] : r)
    if (k == key) return &v;
  return nullptr;
}
std::string str(const ResourceAttributes& r, const std::string& key) {
  const ResourceValue* v = find(r, key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : "<absent>";
}
std::int64_t num(const ResourceAttributes& r, const std::string& key) {
  const ResourceValue* v = find(r, key);
  return v && std::holds_alternative<std::int64_t>(*v) ? std::get<std::int64_t>(*v) : -999;
}

TEST(Uuids, TheFourVectorsOfTheSpec) {
  RunUuids none = internal::run_uuids_from(lookup({}));
  EXPECT_EQ(none.job_uuid, "d2badfc7-0e4c-537b-b4ea-8785f79f8679");
  EXPECT_EQ(none.run_uuid, "b19cd435-659e-5816-b7eb-724bc636e47b");
  RunUuids eos = internal::run_uuids_from(
      lookup({{"SLURM_CLUSTER_NAME", "eos"}, {"SLURM_JOB_ID", "12345"}, {"SLURM_RESTART_COUNT", "0"}}));
  EXPECT_EQ(eos.job_uuid, "b65b814f-1489-5070-b0e3-b2b0e6a3f643");
  EXPECT_EQ(eos.run_uuid, "ccaf9f6c-8189-58ea-a374-ef47a8053f95");
  RunUuids restarted = internal::run_uuids_from(lookup({{"SLURM_CLUSTER_NAME", "eos"},
                                                        {"SLURM_JOB_ID", "12345"},
                                                        {"SLURM_RESTART_COUNT", "2"},
                                                        {"TORCHELASTIC_RESTART_COUNT", "1"}}));
  EXPECT_EQ(restarted.job_uuid, "b65b814f-1489-5070-b0e3-b2b0e6a3f643");
  EXPECT_EQ(restarted.run_uuid, "d032fbad-d34b-54bf-93ab-b9892e36bb8f");
  EXPECT_EQ(restarted.torchelastic_restart_count, "1");
  RunUuids array = internal::run_uuids_from(lookup({{"SLURM_CLUSTER_NAME", "eos"},
                                                    {"SLURM_ARRAY_JOB_ID", "777"},
                                                    {"SLURM_ARRAY_TASK_ID", "3"},
                                                    {"SLURM_JOB_ID", "778"}}));
  EXPECT_EQ(array.job_uuid, "9fee113f-ce3c-5a96-b8dc-119b84e9daec");
  EXPECT_EQ(array.run_uuid, "ebbc5afd-0e4a-5911-add2-42c535e40505");
}

TEST(RunId, Precedence) {
  Config c;
  Env all{{"SLURM_JOB_ID", "slurm-9"}, {"TORCHELASTIC_RUN_ID", "te-run"}, {"PMIX_NAMESPACE", "pmix-ns"}};
  c.run_id = "explicit";
  EXPECT_EQ(internal::resolve_run_id(c, lookup(all)), "explicit");
  c.run_id.clear();
  EXPECT_EQ(internal::resolve_run_id(c, lookup(all)), "slurm-9");
  all.erase("SLURM_JOB_ID");
  EXPECT_EQ(internal::resolve_run_id(c, lookup(all)), "te-run");
  all["TORCHELASTIC_RUN_ID"] = "none";  // torchrun without --rdzv_id
  EXPECT_EQ(internal::resolve_run_id(c, lookup(all)), "pmix-ns");
  EXPECT_EQ(internal::resolve_run_id(c, lookup({{"OMPI_MCA_ess_base_jobid", "ompi-1"}})), "ompi-1");
  std::string random = internal::resolve_run_id(c, lookup({}));
  EXPECT_EQ(random.size(), 12u);
  EXPECT_NE(random, internal::resolve_run_id(c, lookup({})));
}

TEST(Resource, LensKeysThenConsumerThenDetectedThenOtelFillsTheRest) {
  Config c;
  c.service_name = "svc";
  c.user_id = "team-a";
  c.resource_attributes = "service.name=from-otel,extra.key=hello%20world,host.name=from-otel";
  ResourceAttributes consumer = {{"service.name", "consumer-svc"}, {"dl.custom", std::int64_t{5}}};
  Env env{{"SLURM_JOB_ID", "42"},
          {"SLURM_JOB_NAME", "gpt"},
          {"SLURM_NNODES", "2"},
          {"DEPLOYMENT_ENV", "prod"},
          {"KUBERNETES_SERVICE_HOST", "10.0.0.1"},
          {"HOSTNAME", "pod-7"},
          {"K8S_NAMESPACE", "ml"},
          {"CUDA_VISIBLE_DEVICES", "0,1,2"}};
  internal::Resource r = internal::build_resource(c, RankInfo{3, 8, 3}, "run-1", consumer, lookup(env));
  const ResourceAttributes& a = r.attributes;
  EXPECT_EQ(str(a, "service.name"), "consumer-svc");  // the consumer beats lens; OTEL_* only fills gaps
  EXPECT_EQ(str(a, "telemetry.sdk.name"), "lens");
  EXPECT_EQ(num(a, "dl.rank"), 3);
  EXPECT_EQ(num(a, "dl.world_size"), 8);
  EXPECT_EQ(str(a, "nemo.run.id"), "run-1");
  EXPECT_EQ(str(a, "service.instance.id"), "run-1-rank3");
  EXPECT_EQ(str(a, "nemo.user.id"), "team-a");
  EXPECT_EQ(str(a, "deployment.environment"), "prod");
  EXPECT_EQ(num(a, "dl.custom"), 5);
  EXPECT_NE(str(a, "host.name"), "from-otel");  // detected beats OTEL_RESOURCE_ATTRIBUTES
  EXPECT_EQ(num(a, "host.gpu.count"), 3);
  EXPECT_EQ(str(a, "slurm.job.id"), "42");
  EXPECT_EQ(str(a, "slurm.job.name"), "gpt");
  EXPECT_EQ(str(a, "slurm.nnodes"), "2");  // a string, as NeMo Lens sends it
  EXPECT_EQ(str(a, "service.version"), LENS_VERSION_STRING);
  EXPECT_EQ(str(a, "k8s.pod.name"), "pod-7");
  EXPECT_EQ(str(a, "k8s.namespace.name"), "ml");
  EXPECT_EQ(str(a, "extra.key"), "hello world");
  EXPECT_GT(num(a, "process.pid"), 0);
}

// The SLURM keys as NeMo Lens reads them (its variables, every value a string); where its variable is unset, the one
// SLURM sets for every job.
TEST(Resource, SlurmKeysAreNemoLensesAndTheJobVariablesFillItsGaps) {
  Env nemo_lens{{"SLURM_JOB_ID", "42"},           {"SLURM_NODELIST", "node[1-2]"},
                {"SLURM_JOB_NODELIST", "other"},  {"SLURM_NNODES", "2"},
                {"SLURM_NTASKS", "16"},           {"SLURM_PARTITION", "batch"},
                {"SLURM_JOB_PARTITION", "other"}, {"SLURM_CLUSTER_NAME", "eos"}};
  internal::Resource r = internal::build_resource(Config{}, RankInfo{}, "r", {}, lookup(nemo_lens));
  EXPECT_EQ(str(r.attributes, "slurm.nodelist"), "node[1-2]");
  EXPECT_EQ(str(r.attributes, "slurm.partition"), "batch");
  EXPECT_EQ(str(r.attributes, "slurm.nnodes"), "2");
  EXPECT_EQ(str(r.attributes, "slurm.ntasks"), "16");
  EXPECT_EQ(str(r.attributes, "slurm.cluster.name"), "eos");
  Env job_only{{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "node[3-4]"}, {"SLURM_JOB_PARTITION", "gpu"}};
  r = internal::build_resource(Config{}, RankInfo{}, "r", {}, lookup(job_only));
  EXPECT_EQ(str(r.attributes, "slurm.nodelist"), "node[3-4]");
  EXPECT_EQ(str(r.attributes, "slurm.partition"), "gpu");
}

TEST(Resource, WeightsAndBiasesKeysComeFromTheirVariablesWhenSet) {
  internal::Resource r = internal::build_resource(Config{}, RankInfo{}, "r", {},
                                                  lookup({{"WANDB_ENTITY", "team"}, {"WANDB_PROJECT", "gpt"}}));
  EXPECT_EQ(str(r.attributes, "wandb.entity"), "team");
  EXPECT_EQ(str(r.attributes, "wandb.project"), "gpt");
  r = internal::build_resource(Config{}, RankInfo{}, "r", {}, lookup({{"WANDB_ENTITY", ""}}));
  EXPECT_EQ(find(r.attributes, "wandb.entity"), nullptr);
  EXPECT_EQ(find(r.attributes, "wandb.project"), nullptr);
}

TEST(Resource, NoSlurmOrKubernetesKeysWithoutThem) {
  internal::Resource r = internal::build_resource(Config{}, RankInfo{}, "r", {}, lookup({{"K8S_NAMESPACE", "ml"}}));
  EXPECT_EQ(find(r.attributes, "slurm.job.id"), nullptr);
  EXPECT_EQ(find(r.attributes, "k8s.namespace.name"), nullptr);
  EXPECT_EQ(find(r.attributes, "deployment.environment"), nullptr);
}

TEST(Resource, MalformedOtelResourceAttributesAreIgnoredWhole) {
  EXPECT_EQ(internal::parse_resource_attributes("a=1,b=2").size(), 2u);
  for (const char* bad : {"a=1,novalue", "a=1,=x", "a=%zz", "a=1,b=%4"}) {
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(internal::parse_resource_attributes(bad).empty()) << bad;
    std::string err = ::testing::internal::GetCapturedStderr();
    // Reported (or rate-limited after the first), never with the value.
    EXPECT_EQ(err.find("%zz"), std::string::npos) << err;
  }
  Config c;
  c.resource_attributes = "good=1,bad";
  internal::Resource r = internal::build_resource(c, RankInfo{}, "r", {}, lookup({}));
  EXPECT_EQ(find(r.attributes, "good"), nullptr);
}

// A GPU index past int (CUDA_VISIBLE_DEVICES=2147483648) is no index: no GPU identity, a warning, a resource.
TEST(Resource, AGpuIndexPastIntIsNoIndexAndSetupGoesOn) {
  EXPECT_EQ(internal::gpu_index_for(lookup({{"CUDA_VISIBLE_DEVICES", "0,3"}}), 1), 3);
  for (const char* huge : {"2147483648", "99999999999999999999999", "0,2147483648"}) {
    const auto env = lookup({{"CUDA_VISIBLE_DEVICES", huge}});
    const int local_rank = huge[0] == '0' ? 1 : 0;
    EXPECT_EQ(internal::gpu_index_for(env, local_rank), std::nullopt) << huge;
    EXPECT_NO_THROW((void)internal::detect_gpu_identity_from(env, local_rank));
    internal::Resource r = internal::build_resource(Config{}, RankInfo{0, 2, local_rank}, "r", {}, env);
    EXPECT_NE(find(r.attributes, "host.name"), nullptr);
  }
  // The warning naming the variable is rate-limited per process (another test may have said it already): a fresh
  // process shows it (python/tests/test_hostile_calls.py).
}

// The fake NVML library, chosen through LENS_NVML_LIBRARY.
class FakeNvml : public ::testing::Test {
 protected:
  void use(const char* library) {
    ::setenv("LENS_NVML_LIBRARY", library, 1);
    internal::reset_nvml_for_testing();
  }
  void TearDown() override {
    ::unsetenv("LENS_NVML_LIBRARY");
    ::unsetenv("FAKE_NVML_FAIL");
    ::unsetenv("FAKE_NVML_READINGS");
    internal::reset_nvml_for_testing();
  }
  static void wedge(bool wedged) {
    void* h = dlopen(LENS_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(h, nullptr);
    reinterpret_cast<void (*)(bool)>(dlsym(h, "fake_nvml_wedge"))(wedged);
    dlclose(h);
  }
  static int calls() {
    void* h = dlopen(LENS_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
    int* counter = h ? static_cast<int*>(dlsym(h, "fake_nvml_calls")) : nullptr;
    int n = counter ? *counter : 0;
    if (h) dlclose(h);
    return n;
  }
};

TEST_F(FakeNvml, IdentityOfTheLocalRanksDevice) {
  use(LENS_FAKE_NVML);
  std::optional<GpuIdentity> g = internal::detect_gpu_identity_from(lookup({}), 1);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->index, 1);
  EXPECT_EQ(g->name, "NVIDIA H200");
  EXPECT_EQ(g->uuid, "GPU-00000000-1111-2222-3333-000000000001");
  EXPECT_EQ(g->serial, "1650023001");
  EXPECT_EQ(g->pci_bus_id, "00000000:19:00.0");
}

TEST_F(FakeNvml, CudaVisibleDevicesMapsTheIndex) {
  use(LENS_FAKE_NVML);
  std::optional<GpuIdentity> g = internal::detect_gpu_identity_from(lookup({{"CUDA_VISIBLE_DEVICES", "2,3"}}), 1);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->index, 3);
  EXPECT_FALSE(internal::detect_gpu_identity_from(lookup({{"CUDA_VISIBLE_DEVICES", "2,3"}}), 2).has_value());
}

TEST_F(FakeNvml, UuidOrMigEntriesGiveNoGpuKeys) {
  use(LENS_FAKE_NVML);
  EXPECT_FALSE(internal::detect_gpu_identity_from(
                   lookup({{"CUDA_VISIBLE_DEVICES", "GPU-8a3c2d7e-1111-2222-3333-444455556666"}}), 0)
                   .has_value());
  EXPECT_FALSE(internal::detect_gpu_identity_from(
                   lookup({{"CUDA_VISIBLE_DEVICES", "MIG-8a3c2d7e-1111-2222-3333-444455556666"}}), 0)
                   .has_value());
}

TEST_F(FakeNvml, MissingLibraryMissingSymbolAndDeviceErrorGiveNothingAndNoError) {
  use("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(internal::detect_gpu_identity_from(lookup({}), 0).has_value());
  EXPECT_FALSE(internal::nvml_device_count().has_value());
  use(LENS_FAKE_NVML_NO_PCI);
  EXPECT_FALSE(internal::detect_gpu_identity_from(lookup({}), 0).has_value());
  use(LENS_FAKE_NVML);
  ::setenv("FAKE_NVML_FAIL", "device", 1);
  EXPECT_FALSE(internal::detect_gpu_identity_from(lookup({}), 0).has_value());
  ::setenv("FAKE_NVML_FAIL", "init", 1);
  internal::reset_nvml_for_testing();
  EXPECT_FALSE(internal::detect_gpu_identity_from(lookup({}), 0).has_value());
}

TEST_F(FakeNvml, GpuCountFromNvmlWhenCudaVisibleDevicesIsUnset) {
  use(LENS_FAKE_NVML);
  internal::Resource r = internal::build_resource(Config{}, RankInfo{}, "r", {}, lookup({}));
  EXPECT_EQ(num(r.attributes, "host.gpu.count"), 4);
}

TEST_F(FakeNvml, MegatronAttributesAndNvmlOnlyOnExportingRanks) {
  use(LENS_FAKE_NVML);
  megatron::TrainingArgs args;
  args.local_rank = 0;
  args.tensor_model_parallel_size = 2;
  args.global_batch_size = 256;
  args.num_layers = 24;
  args.bf16 = true;
  args.ckpt_format = "torch_dist";
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.exporter = Exporter::kFile;
  c.file_dir = ::testing::TempDir() + "lens-nvml";
  int before = calls();
  // A non-exporting rank (single_rank: rank 3 of 4 exports) never runs the provider.
  Telemetry quiet = setup_telemetry(
      c, {.rank = 0, .world_size = 4, .resource_provider = megatron::resource_provider(args), .reinit = true});
  EXPECT_FALSE(quiet.is_exporting());
  EXPECT_EQ(calls(), before);
  quiet.shutdown();
  ResourceAttributes a = megatron::resource_attributes(args);
  EXPECT_GT(calls(), before);
  EXPECT_EQ(num(a, "dl.tensor_parallel.size"), 2);
  EXPECT_EQ(num(a, "dl.batch_size"), 256);
  EXPECT_EQ(num(a, "megatron.num_layers"), 24);
  EXPECT_EQ(str(a, "megatron.precision"), "bf16");
  EXPECT_EQ(str(a, "megatron.ckpt_format"), "torch_dist");
  EXPECT_EQ(str(a, "dl.gpu.name"), "NVIDIA H200");
  EXPECT_EQ(num(a, "dl.gpu.index"), 0);
  EXPECT_EQ(str(a, "nemo.lens.job_uuid").size(), 36u);
  EXPECT_EQ(find(a, "dl.tensor_parallel.rank"), nullptr) << "no ranks given: the sizes only, as Megatron's";
  args.ranks = megatron::ParallelRanks{.tensor = 1, .pipeline = 2, .data = 3};
  a = megatron::resource_attributes(args);
  EXPECT_EQ(num(a, "dl.tensor_parallel.rank"), 1);
  EXPECT_EQ(num(a, "dl.pipeline_parallel.rank"), 2);
  EXPECT_EQ(num(a, "dl.data_parallel.rank"), 3);
}

const internal::MetricData* metric(const std::vector<internal::MetricData>& all, std::string_view name) {
  for (const internal::MetricData& m : all)
    if (m.name == name) return &m;
  return nullptr;
}

// The rank's GPU (CUDA_VISIBLE_DEVICES' entry for its local rank) read at each collection, by
// OpenTelemetry's hardware names, with the GPU's identity on every point.
TEST_F(FakeNvml, TheRanksGpuIsReadAsMetricsAtEachCollection) {
  use(LENS_FAKE_NVML);
  std::unique_ptr<internal::GpuMetrics> gpu =
      internal::GpuMetrics::for_rank(lookup({{"CUDA_VISIBLE_DEVICES", "2,3"}}), 1);
  ASSERT_NE(gpu, nullptr);
  std::vector<internal::MetricData> out;
  gpu->append(1234, out);
  ASSERT_EQ(out.size(), 6u);
  const internal::MetricData* utilization = metric(out, "hw.gpu.utilization");
  ASSERT_NE(utilization, nullptr);
  EXPECT_EQ(utilization->unit, "1");
  EXPECT_EQ(utilization->kind, InstrumentKind::kGauge);
  EXPECT_DOUBLE_EQ(utilization->points.at(0).double_value, 0.83);  // device 3
  EXPECT_EQ(str(utilization->points[0].attributes, "hw.id"), "GPU-00000000-1111-2222-3333-000000000003");
  EXPECT_EQ(str(utilization->points[0].attributes, "hw.model"), "NVIDIA H200");
  EXPECT_EQ(str(utilization->points[0].attributes, "hw.type"), "gpu");
  EXPECT_EQ(str(utilization->points[0].attributes, "hw.gpu.task"), "general");
  EXPECT_EQ(num(utilization->points[0].attributes, "dl.gpu.index"), 3);
  constexpr std::int64_t kGiB = std::int64_t{1} << 30;
  const internal::MetricData* used = metric(out, "hw.gpu.memory.usage");
  ASSERT_NE(used, nullptr);
  EXPECT_EQ(used->unit, "By");
  EXPECT_EQ(used->kind, InstrumentKind::kUpDownCounter);
  EXPECT_FALSE(used->monotonic);
  EXPECT_EQ(used->points.at(0).int_value, 43 * kGiB);
  EXPECT_EQ(used->points[0].start_unix_nanos, 1234u);
  EXPECT_EQ(metric(out, "hw.gpu.memory.limit")->points.at(0).int_value, 141 * kGiB);
  EXPECT_DOUBLE_EQ(metric(out, "hw.power")->points.at(0).double_value, 512.5);
  EXPECT_EQ(metric(out, "hw.power")->unit, "W");
  EXPECT_EQ(metric(out, "hw.temperature")->points.at(0).int_value, 61);
  EXPECT_EQ(metric(out, "hw.temperature")->unit, "Cel");
  EXPECT_EQ(metric(out, "dl.gpu.clock.sm")->points.at(0).int_value, 1'980'000'000);
  EXPECT_EQ(metric(out, "dl.gpu.clock.sm")->unit, "Hz");
  EXPECT_EQ(str(metric(out, "hw.power")->points[0].attributes, "hw.id"), "GPU-00000000-1111-2222-3333-000000000003");
}

TEST_F(FakeNvml, AReadingNvmlRefusesIsLeftOutNotZero) {
  use(LENS_FAKE_NVML);
  std::unique_ptr<internal::GpuMetrics> gpu = internal::GpuMetrics::for_rank(lookup({}), 0);
  ASSERT_NE(gpu, nullptr);
  ::setenv("FAKE_NVML_FAIL", "power", 1);
  std::vector<internal::MetricData> out;
  gpu->append(0, out);
  EXPECT_EQ(metric(out, "hw.power"), nullptr);
  EXPECT_EQ(out.size(), 5u);
  ::setenv("FAKE_NVML_FAIL", "device", 1);  // the GPU gone between collections: nothing, no error
  out.clear();
  gpu->append(0, out);
  EXPECT_TRUE(out.empty());
}

// Readings no GPU gives (NVML's unsigned garbage: a utilization of 4294967295 %, more memory used than there is,
// 4.3 MW, 4294967295 C, 4.3 PHz) are each left out and counted.
TEST_F(FakeNvml, ReadingsNoGpuGivesAreLeftOutAndCounted) {
  use(LENS_FAKE_NVML);
  std::unique_ptr<internal::GpuMetrics> gpu = internal::GpuMetrics::for_rank(lookup({}), 0);
  ASSERT_NE(gpu, nullptr);
  ::setenv("FAKE_NVML_READINGS", "out_of_range", 1);
  std::vector<internal::MetricData> out;
  gpu->append(7, out);
  ASSERT_EQ(out.size(), 1u) << out[0].name;
  EXPECT_EQ(out[0].name, "lens.gpu.readings.dropped");
  EXPECT_EQ(out[0].points.at(0).int_value, 6) << "utilization, memory used and limit, power, temperature, clock";
  EXPECT_EQ(str(out[0].points[0].attributes, "reason"), "out_of_range");
  EXPECT_EQ(out[0].points[0].start_unix_nanos, 7u);
  ::unsetenv("FAKE_NVML_READINGS");
  out.clear();
  gpu->append(7, out);
  EXPECT_EQ(out.size(), 7u) << "the six readings, and the count so far";
  EXPECT_EQ(metric(out, "lens.gpu.readings.dropped")->points.at(0).int_value, 6);
}

// A wedged NVML call leaves out the GPU metrics only: spans and the other metrics go on, the call is counted once
// and said once, and readings come back with the driver.
TEST_F(FakeNvml, AWedgedNvmlCallLeavesOutTheGpuMetricsOnly) {
  use(LENS_FAKE_NVML);
  Config c;
  c.enabled = true;
  c.logs_enabled = false;
  c.exporter = Exporter::kFile;
  c.file_dir = ::testing::TempDir() + "lens-gpu-wedged";
  std::mutex mutex;
  std::vector<std::string> metric_batches;
  std::size_t span_batches = 0;
  Telemetry t = setup_telemetry(c, {.rank = 0,
                                    .world_size = 1,
                                    .reinit = true,
                                    .span_sink =
                                        [&](const std::string&) {
                                          std::lock_guard lock(mutex);
                                          ++span_batches;
                                          return true;
                                        },
                                    .metric_sink =
                                        [&](const std::string& json) {
                                          std::lock_guard lock(mutex);
                                          metric_batches.push_back(json);
                                          return true;
                                        }});
  const std::uint64_t stuck_before = internal::stuck_driver_calls(internal::DriverApi::kNvml);
  wedge(true);
  for (int i = 0; i < 3; ++i) {
    { LENS_SPAN(megatron::group::job, "megatron.train"); }
    ASSERT_TRUE(t.force_flush()) << "the export thread never waits on NVML past its bound";
  }
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(span_batches, 3u);
    ASSERT_EQ(metric_batches.size(), 3u);
    for (const std::string& batch : metric_batches) {
      EXPECT_EQ(batch.find("\"hw.gpu.utilization\""), std::string::npos);
      EXPECT_NE(batch.find("\"lens.spans.exported\""), std::string::npos);
    }
    EXPECT_NE(metric_batches.back().find("\"lens.driver.stuck_calls\""), std::string::npos);
  }
  EXPECT_EQ(internal::stuck_driver_calls(internal::DriverApi::kNvml), stuck_before + 1);
  wedge(false);
  // The stuck call returns on NVML's own thread when the scheduler runs it, which a loaded machine may delay past any
  // number of flushes: the wait is for the readings, up to 30 s.
  bool back = false;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !back && std::chrono::steady_clock::now() < until;) {
    ASSERT_TRUE(t.force_flush());
    {
      std::lock_guard lock(mutex);
      back = metric_batches.back().find("\"hw.gpu.utilization\"") != std::string::npos;
    }
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(back) << "readings come back with the driver";
  t.shutdown();
}

TEST_F(FakeNvml, NoNvmlNoSuchGpuOrAGpuByUuidGiveNoGpuMetrics) {
  use("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(internal::GpuMetrics::for_rank(lookup({}), 0), nullptr);
  use(LENS_FAKE_NVML);
  EXPECT_EQ(internal::GpuMetrics::for_rank(lookup({}), 4), nullptr);  // the fake has 4
  EXPECT_EQ(internal::GpuMetrics::for_rank(lookup({{"CUDA_VISIBLE_DEVICES", "GPU-8a3c2d7e"}}), 0), nullptr);
}

// Through a setup: an exporting rank with metrics on exports its GPU's readings with its other metrics.
TEST_F(FakeNvml, AnExportingRankExportsItsGpusMetrics) {
  use(LENS_FAKE_NVML);
  Config c;
  c.enabled = true;
  c.traces_enabled = false;
  c.logs_enabled = false;
  c.exporter = Exporter::kFile;  // a build without gRPC has no default exporter
  c.file_dir = ::testing::TempDir() + "lens-gpu-metrics";
  std::vector<std::string> batches;
  Telemetry t = setup_telemetry(
      c, {.rank = 0, .world_size = 1, .local_rank = 2, .reinit = true, .metric_sink = [&](const std::string& json) {
            batches.push_back(json);
            return true;
          }});
  ASSERT_TRUE(t.force_flush());
  t.shutdown();
  ASSERT_FALSE(batches.empty());
  EXPECT_NE(batches[0].find("\"hw.gpu.utilization\""), std::string::npos) << batches[0];
  EXPECT_NE(batches[0].find("GPU-00000000-1111-2222-3333-000000000002"), std::string::npos);
}

// slurm.sluid, slurm.array.sluid and the resiliency extension's nvrx.* keys are copied when set.
TEST(MegatronResource, CopiesTheSchedulersAndResiliencyIdentityWhenSet) {
  const std::vector<std::pair<const char*, const char*>> copies = {
      {"LENS_SLURM_SLUID", "slurm.sluid"},    {"LENS_SLURM_ARRAY_SLUID", "slurm.array.sluid"},
      {"NVRX_CYCLE", "nvrx.cycle"},           {"NVRX_INFRA_RANK", "nvrx.infra_rank"},
      {"NVRX_MEMBERSHIP", "nvrx.membership"}, {"SLURM_ARRAY_TASK_ID", "slurm.array.task_id"}};
  for (const auto& [variable, key] : copies) ::setenv(variable, (std::string("v-") + key).c_str(), 1);
  ::setenv("NVRX_MEMBERSHIP", "", 1);  // empty: left out
  ResourceAttributes a = megatron::resource_attributes(megatron::TrainingArgs{});
  for (const auto& [variable, key] : copies) {
    if (std::string_view(variable) == "NVRX_MEMBERSHIP") {
      EXPECT_EQ(find(a, key), nullptr) << key;
    } else {
      EXPECT_EQ(str(a, key), std::string("v-") + key) << variable;
    }
    ::unsetenv(variable);
  }
}

}  // namespace
}  // namespace lens
