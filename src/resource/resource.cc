#include "resource/resource.h"

#include <openssl/evp.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/process_identity.h"
#include "common/text.h"
#include "lens/version.h"
#include "resource/nvml.h"

namespace lens {

namespace internal {

namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string random_hex(std::size_t digits) {
  unsigned char bytes[16] = {};
  if (getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    auto seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::memcpy(bytes, &seed, sizeof seed);
  }
  std::string out;
  for (std::size_t i = 0; i < digits; ++i) out += kHex[(bytes[i / 2] >> (i % 2 ? 0 : 4)) & 15];
  return out;
}

void set(ResourceAttributes& attributes, std::string key, ResourceValue value) {
  auto it = std::find_if(attributes.begin(), attributes.end(), [&](const auto& kv) { return kv.first == key; });
  if (it != attributes.end())
    it->second = std::move(value);
  else
    attributes.emplace_back(std::move(key), std::move(value));
}

bool has(const ResourceAttributes& attributes, const std::string& key) {
  return std::any_of(attributes.begin(), attributes.end(), [&](const auto& kv) { return kv.first == key; });
}

// Sets `key` from `variable` when the variable is set, as its text.
void set_from(ResourceAttributes& r, const EnvReader& env, const char* key, const char* variable) {
  if (auto v = env.get(variable)) set(r, key, v->text);
}

std::optional<int> visible_device_count(const EnvReader& env) {
  auto v = env.get("CUDA_VISIBLE_DEVICES");
  if (!v) return std::nullopt;
  int n = 0;
  for (std::string_view entry : split(v->text, ','))
    if (!trim(entry).empty()) ++n;
  return n;
}

void detect(ResourceAttributes& r, const EnvLookup& lookup) {
  EnvReader env(lookup, "", "");
  if (const std::string host = this_host(); !host.empty()) set(r, "host.name", host);
  set(r, "process.pid", static_cast<std::int64_t>(::getpid()));
  std::optional<int> gpus = visible_device_count(env);
  if (!gpus) gpus = nvml_device_count();
  if (gpus) set(r, "host.gpu.count", static_cast<std::int64_t>(*gpus));
  if (env.get("SLURM_JOB_ID")) {
    // As NeMo Lens sends them: strings, from the variables it reads; where one is unset, the SLURM_JOB_* variable
    // SLURM sets for every job (SLURM_PARTITION is sbatch's input, often unset): a key NeMo Lens would not send.
    set_from(r, env, "slurm.job.id", "SLURM_JOB_ID");
    set_from(r, env, "slurm.job.name", "SLURM_JOB_NAME");
    set_from(r, env, "slurm.nodelist", env.get("SLURM_NODELIST") ? "SLURM_NODELIST" : "SLURM_JOB_NODELIST");
    set_from(r, env, "slurm.nnodes", "SLURM_NNODES");
    set_from(r, env, "slurm.ntasks", "SLURM_NTASKS");
    set_from(r, env, "slurm.partition", env.get("SLURM_PARTITION") ? "SLURM_PARTITION" : "SLURM_JOB_PARTITION");
    set_from(r, env, "slurm.cluster.name", "SLURM_CLUSTER_NAME");
  }
  if (env.get("KUBERNETES_SERVICE_HOST")) {
    set_from(r, env, "k8s.namespace.name", "K8S_NAMESPACE");
    if (env.get("K8S_POD_NAME"))
      set_from(r, env, "k8s.pod.name", "K8S_POD_NAME");
    else
      set_from(r, env, "k8s.pod.name", "HOSTNAME");
    set_from(r, env, "k8s.pod.uid", "K8S_POD_UID");
    set_from(r, env, "k8s.node.name", "K8S_NODE_NAME");
    set_from(r, env, "k8s.container.name", "K8S_CONTAINER_NAME");
    set_from(r, env, "k8s.job.name", "K8S_JOB_NAME");
  }
}

}  // namespace

std::string resolve_run_id(const Config& config, const EnvLookup& lookup) {
  if (!config.run_id.empty()) return config.run_id;
  EnvReader env(lookup, "", "");
  if (auto v = env.get("SLURM_JOB_ID")) return v->text;
  if (auto v = env.get("TORCHELASTIC_RUN_ID"); v && v->text != "none") return v->text;
  for (const char* name : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})
    if (auto v = env.get(name)) return v->text;
  return random_hex(12);
}

RunUuids run_uuids_from(const EnvLookup& lookup) {
  EnvReader env(lookup, "", "");
  auto value = [&](const char* name, const char* otherwise) {
    auto v = env.get(name);
    return v ? v->text : std::string(otherwise);
  };
  std::string cluster = value("SLURM_CLUSTER_NAME", "nocluster");
  bool array = env.get("SLURM_ARRAY_TASK_ID").has_value();
  std::string job_key = value(array ? "SLURM_ARRAY_JOB_ID" : "SLURM_JOB_ID", "nojob");
  std::string run = "nemo.lens.run/" + cluster + "/" + job_key;
  if (!array) run += "/sr" + value("SLURM_RESTART_COUNT", "0");
  RunUuids ids;
  if (auto te = env.get("TORCHELASTIC_RESTART_COUNT")) {
    run += "/te" + te->text;
    ids.torchelastic_restart_count = te->text;
  }
  ids.job_uuid = uuid5_url("nemo.lens.job/" + cluster + "/" + job_key);
  ids.run_uuid = uuid5_url(run);
  return ids;
}

std::optional<int> gpu_index_for(const EnvLookup& lookup, int local_rank) {
  EnvReader env(lookup, "", "");
  auto visible = env.get("CUDA_VISIBLE_DEVICES");
  if (!visible) return local_rank;
  std::vector<std::string_view> entries = split(visible->text, ',');
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= entries.size()) return std::nullopt;
  std::string_view entry = trim(entries[static_cast<std::size_t>(local_rank)]);
  if (entry.empty() || !std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;  // GPU-<uuid> or MIG-<uuid>: not an NVML index
  const std::optional<std::int64_t> index = whole_number(entry, 0, INT32_MAX);
  if (!index) {
    log_warning("CUDA_VISIBLE_DEVICES entry '%s' is not a GPU index (0 to %d): no GPU identity on the resource",
                printable_excerpt(entry, 32).c_str(), INT32_MAX);
    return std::nullopt;
  }
  return static_cast<int>(*index);
}

std::optional<GpuIdentity> detect_gpu_identity_from(const EnvLookup& env, int local_rank) {
  std::optional<int> index = gpu_index_for(env, local_rank);
  return index ? nvml_device_identity(*index) : std::nullopt;
}

ResourceAttributes parse_resource_attributes(const std::string& raw) {
  ResourceAttributes out;
  std::size_t position = 0;
  for (std::string_view entry : split(raw, ',')) {
    ++position;
    if (trim(entry).empty()) continue;
    std::size_t eq = entry.find('=');
    std::optional<std::string> key =
        eq == std::string_view::npos ? std::nullopt : percent_decode(trim(entry.substr(0, eq)));
    std::optional<std::string> value =
        eq == std::string_view::npos ? std::nullopt : percent_decode(trim(entry.substr(eq + 1)));
    if (!key || key->empty() || !value) {
      log_warning(
          "OTEL_RESOURCE_ATTRIBUTES is malformed (entry %zu is not key=value with valid %%XX escapes); "
          "the whole variable is ignored",
          position);
      return {};
    }
    out.emplace_back(std::move(*key), std::move(*value));
  }
  return out;
}

Resource build_resource(const Config& config, const RankInfo& ranks, const std::string& run_id,
                        const ResourceAttributes& consumer, const EnvLookup& lookup) {
  EnvReader env(lookup, "", "");
  Resource r;
  set(r.attributes, "service.name", config.service_name);
  set(r.attributes, "service.version", std::string(LENS_VERSION_STRING));
  set(r.attributes, "telemetry.sdk.name", std::string("lens"));
  set(r.attributes, "telemetry.sdk.language", std::string("cpp"));
  set(r.attributes, "telemetry.sdk.version", std::string(LENS_VERSION_STRING));
  set(r.attributes, "dl.rank", std::int64_t{ranks.rank});
  set(r.attributes, "dl.world_size", std::int64_t{ranks.world_size});
  set(r.attributes, "nemo.run.id", run_id);
  set(r.attributes, "service.instance.id", run_id + "-rank" + std::to_string(ranks.rank));
  if (!config.user_id.empty()) set(r.attributes, "nemo.user.id", config.user_id);
  // Weights & Biases Weave needs them on the resource (NeMo Lens's W&B fields read the same variables).
  set_from(r.attributes, env, "wandb.entity", "WANDB_ENTITY");
  set_from(r.attributes, env, "wandb.project", "WANDB_PROJECT");
  if (auto v = env.get("DEPLOYMENT_ENV"))
    set(r.attributes, "deployment.environment", v->text);
  else if (auto w = env.get("ENVIRONMENT"))
    set(r.attributes, "deployment.environment", w->text);
  for (const auto& [key, value] : consumer) set(r.attributes, key, value);
  detect(r.attributes, lookup);
  for (auto& [key, value] : parse_resource_attributes(config.resource_attributes))
    if (!has(r.attributes, key)) r.attributes.emplace_back(std::move(key), std::move(value));
  return r;
}

}  // namespace internal

std::string uuid5_url(std::string_view name) {
  static constexpr unsigned char kUrlNamespace[16] = {0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1,
                                                      0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr) == 1 &&
            EVP_DigestUpdate(ctx, kUrlNamespace, sizeof kUrlNamespace) == 1 &&
            EVP_DigestUpdate(ctx, name.data(), name.size()) == 1 && EVP_DigestFinal_ex(ctx, digest, &length) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("lens: OpenSSL could not compute sha1");
  digest[6] = static_cast<unsigned char>((digest[6] & 0x0F) | 0x50);  // version 5
  digest[8] = static_cast<unsigned char>((digest[8] & 0x3F) | 0x80);  // RFC 4122 variant
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += internal::kHex[digest[i] >> 4];
    out += internal::kHex[digest[i] & 15];
  }
  return out;
}

RunUuids run_uuids() { return internal::run_uuids_from(internal::process_env()); }

std::string resolve_run_id(const Config& config) { return internal::resolve_run_id(config, internal::process_env()); }

std::optional<GpuIdentity> detect_gpu_identity(int local_rank) {
  return internal::detect_gpu_identity_from(internal::process_env(), local_rank);
}

ResourceAttributes detect_resource() {
  ResourceAttributes r;
  internal::detect(r, internal::process_env());
  return r;
}

}  // namespace lens
