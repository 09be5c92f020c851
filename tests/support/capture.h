// Telemetry set up with an in-memory exporter, and the exported spans read back as JSON (nlohmann), so tests
// check what a collector would receive.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "export/memory_exporter.h"
#include "lens/megatron.h"
#include "lens/telemetry.h"
#include "telemetry/setup_internal.h"

namespace lens::testing {

using nlohmann::json;

// Where capture_config's process records go: the test's own directory, removed when its Capture ends.
inline std::string capture_directory() { return ::testing::TempDir() + "lens-capture-" + std::to_string(::getpid()); }

inline Config capture_config(std::string spec = "all") {
  Config c;
  c.catalogue = megatron::catalogue();
  c.enabled = true;
  c.span_groups = std::move(spec);
  c.span_batch.schedule_delay_ms = 60000;  // exports happen on flush, when the test says
  // Hang snapshots are on by default: the rank's process record goes to a directory of the test's, not ./telemetry.
  c.file_dir = capture_directory();
  return c;
}

class Capture {
 public:
  explicit Capture(Config config = capture_config(), ResourceAttributes resource = {}, RankInfo ranks = {})
      : shared_(std::make_shared<internal::MemoryExporter::Shared>()),
        telemetry_(internal::setup(config,
                                   {.rank = ranks.rank,
                                    .world_size = ranks.world_size,
                                    .local_rank = ranks.local_rank,
                                    .resource_attributes = std::move(resource),
                                    .reinit = true},
                                   std::make_unique<internal::MemoryExporter>(shared_))),
        owns_directory_(config.file_dir == capture_directory()) {}
  ~Capture() {
    telemetry_.shutdown();
    // Every test process leaves one otherwise (thousands in /tmp after a few runs), and a later process with the
    // same pid would find its files.
    if (owns_directory_) std::filesystem::remove_all(capture_directory());
  }

  Telemetry& telemetry() { return telemetry_; }
  internal::MemoryExporter::Shared& exporter() { return *shared_; }

  // Every request exported so far, parsed.
  std::vector<json> requests() {
    telemetry_.force_flush();
    std::lock_guard lock(shared_->mutex);
    std::vector<json> out;
    for (const std::string& r : shared_->requests) out.push_back(json::parse(r));
    return out;
  }
  // Every span exported so far, in export order.
  std::vector<json> spans() {
    std::vector<json> out;
    for (const json& r : requests())
      for (const json& rs : r["resourceSpans"])
        for (const json& ss : rs["scopeSpans"])
          for (const json& s : ss["spans"]) out.push_back(s);
    return out;
  }
  json span(const std::string& name) {
    for (json& s : spans())
      if (s["name"] == name) return s;
    return nullptr;
  }

 private:
  std::shared_ptr<internal::MemoryExporter::Shared> shared_;
  Telemetry telemetry_;
  bool owns_directory_;
};

// The value of attribute `key` in an OTLP/JSON attribute list (null when absent).
inline json attribute(const json& holder, const std::string& key) {
  if (!holder.contains("attributes")) return nullptr;
  for (const json& kv : holder["attributes"])
    if (kv["key"] == key) return kv["value"];
  return nullptr;
}

}  // namespace lens::testing
