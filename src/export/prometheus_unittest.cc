// The Prometheus exposition: names, labels, target_info, histograms, and the endpoint itself (bind errors,
// a scrape over HTTP).
#include "export/prometheus.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/process_identity.h"
#include "export/json_lines_exporter.h"
#include "lens/megatron.h"
#include "lens/metrics.h"
#include "support/capture.h"
#include "support/net.h"

namespace lens {
namespace {

using internal::MetricData;
using internal::MetricPoint;

MetricData data(std::string name, std::string unit, InstrumentKind kind) {
  MetricData m{std::move(name), std::move(unit), "", kind, false, kind == InstrumentKind::kCounter, false, {}, {}};
  return m;
}

TEST(PrometheusNames, FollowTheOpenTelemetryRules) {
  EXPECT_EQ(internal::prometheus_name(data("megatron.training.step_duration_ms", "ms", InstrumentKind::kHistogram)),
            "megatron_training_step_duration_ms_milliseconds");
  EXPECT_EQ(internal::prometheus_name(data("megatron.training.loss", "", InstrumentKind::kGauge)),
            "megatron_training_loss");
  EXPECT_EQ(internal::prometheus_name(data("megatron.training.skipped_iters", "", InstrumentKind::kCounter)),
            "megatron_training_skipped_iters_total");
  EXPECT_EQ(internal::prometheus_name(data("lens.spans.exported", "{span}", InstrumentKind::kCounter)),
            "lens_spans_exported_total");
  EXPECT_EQ(internal::prometheus_name(data("io.read", "By", InstrumentKind::kCounter)), "io_read_bytes_total");
  EXPECT_EQ(internal::prometheus_name(data("gpu.util", "1", InstrumentKind::kGauge)), "gpu_util_ratio");
  EXPECT_EQ(internal::prometheus_name(data("wait_seconds", "s", InstrumentKind::kGauge)), "wait_seconds");
}

TEST(PrometheusText, TargetInfoIdentityLabelsAndCumulativeBuckets) {
  internal::Resource resource{{{"service.name", std::string("svc")},
                               {"nemo.run.id", std::string("run-7")},
                               {"service.instance.id", std::string("run-7-rank0")},
                               {"dl.rank", std::int64_t{0}}}};
  MetricData loss = data("megatron.training.loss", "", InstrumentKind::kGauge);
  loss.description = "Training loss value at each log interval.";
  MetricPoint p;
  p.double_value = 2.5;
  loss.points.push_back(p);
  MetricData h = data("step", "ms", InstrumentKind::kHistogram);
  h.bounds = {10, 100};
  MetricPoint hp;
  hp.bucket_counts = {1, 2, 3};
  hp.count = 6;
  hp.sum = 700;
  hp.attributes = {{"phase", std::string("train")}};
  h.points.push_back(hp);
  std::string text = internal::render_prometheus(resource, {loss, h});
  EXPECT_NE(text.find("target_info{service_name=\"svc\",nemo_run_id=\"run-7\",service_instance_id=\"run-7-rank0\","
                      "dl_rank=\"0\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE megatron_training_loss gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP megatron_training_loss Training loss value at each log interval.\n"), std::string::npos);
  EXPECT_NE(text.find("megatron_training_loss{nemo_run_id=\"run-7\",service_instance_id=\"run-7-rank0\"} 2.5\n"),
            std::string::npos)
      << text;
  const std::string l = "{nemo_run_id=\"run-7\",service_instance_id=\"run-7-rank0\",phase=\"train\"";
  EXPECT_NE(text.find("step_milliseconds_bucket" + l + ",le=\"10\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step_milliseconds_bucket" + l + ",le=\"100\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step_milliseconds_bucket" + l + ",le=\"+Inf\"} 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step_milliseconds_count" + l + "} 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step_milliseconds_sum" + l + "} 700\n"), std::string::npos) << text;
}

// A series the scoring rank records about another rank names that rank's service instance: the point's value of an
// identity key replaces the process's, once.
TEST(PrometheusText, APointsOwnIdentityValueReplacesTheProcesss) {
  internal::Resource resource{
      {{"nemo.run.id", std::string("run-7")}, {"service.instance.id", std::string("run-7-rank0")}}};
  MetricData flagged = data("lens.straggler.flagged_windows", "", InstrumentKind::kGauge);
  MetricPoint p;
  p.double_value = 2;
  p.attributes = {{"dl.rank", std::int64_t{1}}, {"service.instance.id", std::string("run-7-rank1")}};
  flagged.points.push_back(p);
  const std::string text = internal::render_prometheus(resource, {flagged});
  EXPECT_NE(text.find("lens_straggler_flagged_windows{nemo_run_id=\"run-7\",dl_rank=\"1\","
                      "service_instance_id=\"run-7-rank1\"} 2\n"),
            std::string::npos)
      << text;
}

Config prometheus_config(int port) {
  Config c = testing::capture_config("job");
  c.exporter = Exporter::kConsole;
  c.traces_enabled = false;
  c.metrics_exporter = SignalExporter::kPrometheus;
  c.prometheus_host = "127.0.0.1";
  c.prometheus_port = port;
  c.run_id = "prom-run";
  return c;
}

TEST(PrometheusEndpoint, ServesTheTrainingMetricsOverHttp) {
  int port = lens::testing::free_port();
  Telemetry t = setup_telemetry(prometheus_config(port), {.rank = 0, .world_size = 1, .reinit = true});
  megatron::record_training_metrics({.step_duration_ms = 250.0, .loss = 2.75, .skipped_iters = 1});
  httplib::Client client("127.0.0.1", port);
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  const std::string& body = response->body;
  EXPECT_NE(body.find("megatron_training_loss{nemo_run_id=\"prom-run\",service_instance_id=\"prom-run-rank0\"} 2.75"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("megatron_training_skipped_iters_total{"), std::string::npos);
  EXPECT_NE(body.find("megatron_training_step_duration_ms_milliseconds_count{"), std::string::npos);
  EXPECT_NE(body.find("lens_spans_dropped_total{"), std::string::npos);
  EXPECT_TRUE(t.shutdown());
  EXPECT_FALSE(client.Get("/metrics"));  // stopped with the setup
}

// Another process's listening socket on loopback `port`, with `option` (SO_REUSEADDR or SO_REUSEPORT) set; -1 on
// failure.
int listen_on(int port, int option) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, option, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A port that cannot be bound is not a ConfigError at setup (which pretrain_gpt's all-or-none setup would turn into
// the end of every rank). Telemetry never takes a job down: a warning, and no endpoint.
TEST(PrometheusEndpoint, APortInUseIsAWarningAndTheJobGoesOn) {
  int port = lens::testing::free_port();
  int fd = listen_on(port, SO_REUSEADDR);
  ASSERT_GE(fd, 0);
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(prometheus_config(port), {.rank = 0, .world_size = 1, .reinit = true});
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("cannot serve Prometheus metrics on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << said;
  EXPECT_NE(said.find("rank 0's metrics are not served; the job goes on"), std::string::npos) << said;
  megatron::record_training_metrics({.loss = 2.5});  // the rank records as before
  EXPECT_TRUE(t.shutdown());
  ::close(fd);
}

// Ranks on one host that would pick the same port must not share it through SO_REUSEPORT and answer a random share
// of the scrapes. (The other rank here is a socket with SO_REUSEPORT set.)
TEST(PrometheusEndpoint, APortSharedThroughReusePortIsNotServed) {
  int port = lens::testing::free_port();
  int fd = listen_on(port, SO_REUSEPORT);
  ASSERT_GE(fd, 0);
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(prometheus_config(port), {.rank = 0, .world_size = 1, .reinit = true});
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("metrics are not served"), std::string::npos);
  t.shutdown();
  ::close(fd);
}

// Every rank of a host exporting to Prometheus (all_ranks) serves a port of its own, the port + its local rank, and
// says where in a file Prometheus's file service discovery reads.
TEST(PrometheusEndpoint, EachLocalRankServesItsOwnPortAndSaysWhere) {
  int base = lens::testing::free_port();
  Config c = prometheus_config(base);
  c.rank_strategy = "all_ranks";
  Telemetry t = setup_telemetry(c, {.rank = 5, .world_size = 8, .local_rank = 1, .reinit = true});
  httplib::Client client("127.0.0.1", base + 1);
  auto scraped = client.Get("/metrics");
  ASSERT_TRUE(scraped);
  EXPECT_EQ(scraped->status, 200);
  // The serving process's own file: run, rank, host and pid.
  const std::filesystem::path target = std::filesystem::path(c.file_dir) / "prometheus" /
                                       ("prom-run.rank5." + internal::run_directory_name(internal::this_host()) + "." +
                                        std::to_string(::getpid()) + ".json");
  std::ifstream in(target);
  ASSERT_TRUE(in) << target;
  const nlohmann::json groups = nlohmann::json::parse(in);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0]["targets"], nlohmann::json::array({"127.0.0.1:" + std::to_string(base + 1)}));
  EXPECT_EQ(groups[0]["labels"]["nemo_run_id"], "prom-run");
  EXPECT_EQ(groups[0]["labels"]["dl_rank"], "5");
  EXPECT_EQ(groups[0]["labels"]["dl_local_rank"], "1");
  EXPECT_TRUE(t.shutdown());
  EXPECT_FALSE(std::filesystem::exists(target));  // gone with the endpoint
}

TEST(PrometheusEndpoint, APortPastTheLastIsAWarning) {
  Config c = prometheus_config(65535);
  c.rank_strategy = "all_ranks";
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(c, {.rank = 2, .world_size = 4, .local_rank = 2, .reinit = true});
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("is past 65535"), std::string::npos);
  t.shutdown();
}

// Anyone who can reach the port could POST a gigabyte and grow the rank by as much: bodies are refused past 4 KiB,
// and the endpoint goes on answering scrapes.
TEST(PrometheusEndpoint, ALargeRequestBodyIsRefusedUnread) {
  // The endpoint answers 413 and closes while the client is still sending: its next write gets EPIPE (the
  // client, not lens, would die of SIGPIPE).
  std::signal(SIGPIPE, SIG_IGN);
  int port = lens::testing::free_port();
  Telemetry t = setup_telemetry(prometheus_config(port), {.rank = 0, .world_size = 1, .reinit = true});
  httplib::Client client("127.0.0.1", port);
  auto posted = client.Post("/metrics", std::string(8 << 20, 'x'), "application/octet-stream");
  EXPECT_TRUE(!posted || posted->status == 413) << posted->status;
  auto scraped = client.Get("/metrics");
  ASSERT_TRUE(scraped);
  EXPECT_EQ(scraped->status, 200);
  t.shutdown();
}

// A TCP connection from `source` (an address of the loopback network) to 127.0.0.1:port; -1 on failure.
int connect_from(const char* source, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// GET /metrics from `source`, the whole answer read within `limit` (empty when none came).
std::string scrape_from(const char* source, int port, std::chrono::milliseconds limit) {
  int fd = connect_from(source, port);
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: lens\r\nConnection: close\r\n\r\n";
  std::string answer;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    const auto until = std::chrono::steady_clock::now() + limit;
    char buffer[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      answer.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return answer;
}

// Connections of `fds` the server has not closed.
int still_open(const std::vector<int>& fds) {
  int open = 0;
  char byte;
  for (int fd : fds) {
    ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    open += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return open;
}

// Idle connections cannot delay or starve a scrape, nor hold the training process's files: they hold no thread, one
// address holds at most 16 (64 in all), and an idle one is closed after 2 s.
TEST(PrometheusEndpoint, IdleConnectionsNeitherStarveAScrapeNorHoldTheRank) {
  int port = lens::testing::free_port();
  Telemetry t = setup_telemetry(prometheus_config(port), {.rank = 0, .world_size = 1, .reinit = true});
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = connect_from("127.0.0.1", port);
    if (fd >= 0) idle.push_back(fd);
  }
  const std::string answer = scrape_from("127.0.0.2", port, std::chrono::seconds(5));
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer.substr(0, 300);
  EXPECT_NE(answer.find("lens_spans_dropped_total{"), std::string::npos);
  auto eventually = [](auto done, std::chrono::seconds limit) {
    for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;)
      if (done())
        return true;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return done();
  };
  EXPECT_TRUE(eventually([&] { return still_open(idle) <= 16; }, std::chrono::seconds(1)))
      << still_open(idle) << " idle connections from one address held";
  EXPECT_TRUE(eventually([&] { return still_open(idle) == 0; }, std::chrono::seconds(10)))
      << still_open(idle) << " idle connections still held after the idle timeout";
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(scrape_from("127.0.0.1", port, std::chrono::seconds(5)).rfind("HTTP/1.1 200", 0), 0u);
  t.shutdown();
}

}  // namespace
}  // namespace lens
