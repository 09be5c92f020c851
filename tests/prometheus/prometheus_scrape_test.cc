// A real Prometheus server (Debian's) scrapes lens's /metrics; its HTTP API must return what was recorded, by
// the query CONTRACT §8 documents, and the histogram's buckets must add up.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "lens/megatron.h"
#include "lens/telemetry.h"
#include "support/net.h"

extern char** environ;

namespace {

using nlohmann::json;

class PrometheusServer {
 public:
  PrometheusServer(const std::string& dir, int port, int target_port) : port_(port) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                           << "scrape_configs:\n  - job_name: lens\n    static_configs:\n"
                                           << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    std::vector<std::string> args = {LENS_PROMETHEUS_PROGRAM, "--config.file=" + dir + "/prometheus.yml",
                                     "--storage.tsdb.path=" + dir + "/data",
                                     "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    started_ = posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) == 0;
  }
  ~PrometheusServer() {
    if (!started_) return;
    ::kill(pid_, SIGTERM);
    int status;
    ::waitpid(pid_, &status, 0);
  }
  bool started() const { return started_; }

  // The instant-query result vector (empty until a scrape has it), polled for up to `patience`.
  json query(const std::string& promql, std::chrono::seconds patience = std::chrono::seconds(20)) {
    httplib::Client client("127.0.0.1", port_);
    auto until = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < until) {
      auto r = client.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
      if (r && r->status == 200) {
        json body = json::parse(r->body);
        if (body["status"] == "success" && !body["data"]["result"].empty()) return body["data"]["result"];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return json::array();
  }

 private:
  int port_;
  pid_t pid_ = -1;
  bool started_ = false;
};

double value_of(const json& result) { return std::stod(result[0]["value"][1].get<std::string>()); }

TEST(Prometheus, ScrapesLensAndAnswersTheSpecQuery) {
  int lens_port = lens::testing::free_port();
  lens::Config c = lens::megatron::config_from_env();
  c.enabled = true;
  c.traces_enabled = false;
  c.exporter = lens::Exporter::kConsole;
  c.metrics_exporter = lens::SignalExporter::kPrometheus;
  c.prometheus_host = "127.0.0.1";
  c.prometheus_port = lens_port;
  c.run_id = "prom-" + std::to_string(::getpid());
  lens::Telemetry t = lens::setup_telemetry(c, {.rank = 0, .world_size = 1});
  ASSERT_TRUE(t.is_exporting());
  for (double ms : {120.0, 480.0, 9000.0}) lens::megatron::record_training_metrics({.step_duration_ms = ms});
  lens::megatron::record_training_metrics({.loss = 2.375, .skipped_iters = 2, .learning_rate = 3e-4});

  std::string dir = ::testing::TempDir() + "lens-prometheus-" + std::to_string(::getpid());
  PrometheusServer prometheus(dir, lens::testing::free_port(), lens_port);
  ASSERT_TRUE(prometheus.started()) << "is Debian's prometheus installed (scripts/setup-deps.sh)?";

  json loss = prometheus.query("megatron_training_loss{nemo_run_id=\"" + c.run_id + "\"}");
  ASSERT_EQ(loss.size(), 1u) << "Prometheus never saw the series";
  EXPECT_DOUBLE_EQ(value_of(loss), 2.375);
  EXPECT_EQ(loss[0]["metric"]["service_instance_id"], c.run_id + "-rank0");

  // The query of CONTRACT §8 selects the run's training series.
  json all = prometheus.query("{nemo_run_id=\"" + c.run_id + "\", __name__=~\"megatron_training_.*\"}");
  std::set<std::string> names;
  for (const json& series : all) names.insert(series["metric"]["__name__"].get<std::string>());
  EXPECT_TRUE(names.count("megatron_training_learning_rate"));
  EXPECT_TRUE(names.count("megatron_training_skipped_iters_total"));
  EXPECT_TRUE(names.count("megatron_training_step_duration_ms_milliseconds_count"));

  const std::string h = "megatron_training_step_duration_ms_milliseconds";
  const std::string sel = "{nemo_run_id=\"" + c.run_id + "\"}";
  EXPECT_DOUBLE_EQ(value_of(prometheus.query(h + "_count" + sel)), 3.0);
  EXPECT_DOUBLE_EQ(value_of(prometheus.query(h + "_sum" + sel)), 9600.0);
  std::string inf = "{nemo_run_id=\"" + c.run_id + "\",le=\"+Inf\"}";
  EXPECT_DOUBLE_EQ(value_of(prometheus.query(h + "_bucket" + inf)), 3.0);  // the buckets add up to the count
  std::string le500 = "{nemo_run_id=\"" + c.run_id + "\",le=\"500\"}";
  EXPECT_DOUBLE_EQ(value_of(prometheus.query(h + "_bucket" + le500)), 2.0);
  EXPECT_TRUE(t.shutdown());
}

}  // namespace
