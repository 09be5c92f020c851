#include "resource/resource.h"

#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "lens/version.h"

namespace lens::internal {

namespace {

std::string random_hex(std::size_t digits) {
  static constexpr char kHex[] = "0123456789abcdef";
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

Resource build_resource(const Config& config, const RankInfo& ranks, const std::string& run_id,
                        const ResourceAttributes& consumer, const EnvLookup& lookup) {
  EnvReader env(lookup, "", "");
  Resource r;
  set(r.attributes, "service.name", config.service_name);
  set(r.attributes, "telemetry.sdk.name", std::string("lens"));
  set(r.attributes, "telemetry.sdk.language", std::string("cpp"));
  set(r.attributes, "telemetry.sdk.version", std::string(LENS_VERSION_STRING));
  set(r.attributes, "dl.rank", std::int64_t{ranks.rank});
  set(r.attributes, "dl.world_size", std::int64_t{ranks.world_size});
  set(r.attributes, "nemo.run.id", run_id);
  set(r.attributes, "service.instance.id", run_id + "-rank" + std::to_string(ranks.rank));
  if (!config.user_id.empty()) set(r.attributes, "nemo.user.id", config.user_id);
  if (auto v = env.get("DEPLOYMENT_ENV"))
    set(r.attributes, "deployment.environment", v->text);
  else if (auto w = env.get("ENVIRONMENT"))
    set(r.attributes, "deployment.environment", w->text);
  for (const auto& [key, value] : consumer) set(r.attributes, key, value);
  return r;
}

}  // namespace lens::internal
