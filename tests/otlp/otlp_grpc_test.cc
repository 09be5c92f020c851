// OTLP over gRPC against a collector of the test's own: a gRPC server on loopback with a generic (byte-buffer)
// service that answers each Export as the test says. Covers the method names, headers as metadata, the
// User-Agent, gzip, the retried codes (UNAVAILABLE; RESOURCE_EXHAUSTED only with a RetryInfo, whose delay is
// honoured), no retry on INVALID_ARGUMENT, partial success, an absent collector, one that never answers, and TLS
// with a self-signed certificate made by openssl (trusted: works; untrusted: fails, nothing arrives).
#include "export/otlp_grpc.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "lens/lens.h"
#include "support/net.h"
#include "support/otlp_config.h"
#include "support/self_signed.h"
#include "support/setup_error.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using std::chrono::milliseconds;

struct Call {
  std::string method, body;
  std::multimap<std::string, std::string> metadata;
};

// What the collector answers: a status, and the response bytes when OK.
using Respond = std::function<grpc::Status(const Call&, std::string& response, int attempt)>;

class Reactor final : public grpc::ServerGenericBidiReactor {
 public:
  Reactor(grpc::GenericCallbackServerContext* context, const Respond& respond, std::atomic<int>& calls,
          std::mutex& mutex, std::vector<Call>& received)
      : context_(context), respond_(respond), calls_(calls), mutex_(mutex), received_(received) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request"));
    Call call{context_->method(), bytes_of(request_), {}};
    for (const auto& [k, v] : context_->client_metadata())
      call.metadata.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    {
      std::lock_guard lock(mutex_);
      received_.push_back(call);
    }
    std::string response;
    grpc::Status status = respond_(call, response, ++calls_);
    if (!status.ok()) return Finish(status);
    grpc::Slice slice(response.data(), response.size());
    response_ = grpc::ByteBuffer(&slice, 1);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  static std::string bytes_of(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    std::string out;
    (void)buffer.Dump(&slices);
    for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return out;
  }

  grpc::GenericCallbackServerContext* context_;
  const Respond& respond_;
  std::atomic<int>& calls_;
  std::mutex& mutex_;
  std::vector<Call>& received_;
  grpc::ByteBuffer request_, response_;
};

class GrpcCollector : public grpc::CallbackGenericService {
 public:
  explicit GrpcCollector(Respond respond,
                         std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials(),
                         bool accept_gzip = true)
      : respond_(std::move(respond)) {
    grpc::ServerBuilder builder;
    if (!accept_gzip) builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterCallbackGenericService(this);
    server_ = builder.BuildAndStart();
  }
  ~GrpcCollector() override { server_->Shutdown(std::chrono::system_clock::now() + milliseconds(500)); }

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    return new Reactor(context, respond_, calls_, mutex_, received_);
  }
  int port() const { return port_; }
  int calls() const { return calls_.load(); }
  std::vector<Call> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  Respond respond_;
  int port_ = 0;
  std::atomic<int> calls_{0};
  std::mutex mutex_;
  std::vector<Call> received_;
  std::unique_ptr<grpc::Server> server_;
};

grpc::Status ok(const Call&, std::string&, int) { return grpc::Status::OK; }

Config grpc_config(int port, const char* scheme = "http") {
  return testing::otlp_test_config(OtlpProtocol::kGrpc, std::string(scheme) + "://127.0.0.1:" + std::to_string(port));
}

std::string header(const Call& call, const std::string& key) {
  auto it = call.metadata.find(key);
  return it == call.metadata.end() ? std::string() : it->second;
}

// An endpoint set in code with credentials, a query or a fragment (the environment's are refused at setup): gRPC's
// resolver gets the host and port alone, so no token reaches its log.
TEST(OtlpGrpc, TheTargetIsTheHostAndPortAlone) {
  lens::OtlpSignalConfig s;
  for (const char* url :
       {"http://apikey:TOKEN@collector:4317", "https://TOKEN@collector:4317/x?k=TOKEN", "collector:4317#TOKEN"}) {
    s.endpoint = url;
    EXPECT_EQ(lens::internal::otlp_grpc_target(s).address, "collector:4317") << url;
  }
}

TEST(OtlpGrpc, ExportArrivesWithMetadataAndUserAgent) {
  GrpcCollector collector(ok);
  Config c = grpc_config(collector.port());
  c.otlp_traces.headers = {{"Authorization", "Bearer s3cret-token"}, {"X-Tenant", "team-a"}};
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "over-grpc", {"k", 1}); }
  ASSERT_TRUE(t.shutdown());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("s3cret-token"), std::string::npos) << log;
  std::vector<Call> received = collector.received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "/opentelemetry.proto.collector.trace.v1.TraceService/Export");
  EXPECT_EQ(header(received[0], "authorization"), "Bearer s3cret-token");
  EXPECT_EQ(header(received[0], "x-tenant"), "team-a");
  EXPECT_NE(header(received[0], "user-agent").find("lens/"), std::string::npos);
  EXPECT_NE(received[0].body.find("over-grpc"), std::string::npos);
  EXPECT_EQ(t.span_stats().exported, 1u);
}

// gRPC hides its compression from the service, so the proof is a collector that refuses gzip: with
// compression on, lens's requests are gzip (refused); off, they are not (accepted).
TEST(OtlpGrpc, GzipIsGrpcsMessageCompression) {
  GrpcCollector collector(ok, grpc::InsecureServerCredentials(), /*accept_gzip=*/false);
  for (Compression compression : {Compression::kGzip, Compression::kNone}) {
    Config c = grpc_config(collector.port());
    c.otlp_traces.compression = compression;
    Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
    { LENS_SPAN(mg::job, "maybe-zipped"); }
    t.shutdown();
    EXPECT_EQ(t.span_stats().exported, compression == Compression::kGzip ? 0u : 1u);
  }
}

TEST(OtlpGrpc, MetricsAndLogsUseTheirServices) {
  GrpcCollector collector(ok);
  Config c = grpc_config(collector.port());
  c.metrics_enabled = true;
  c.logs_enabled = true;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  lens::log(Severity::kInfo, "hello");
  ASSERT_TRUE(t.shutdown());
  std::set<std::string> methods;
  for (const Call& call : collector.received()) methods.insert(call.method);
  EXPECT_TRUE(methods.count("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"));
  EXPECT_TRUE(methods.count("/opentelemetry.proto.collector.logs.v1.LogsService/Export"));
  EXPECT_EQ(t.log_stats().exported, 1u);
}

TEST(OtlpGrpc, UnavailableIsRetried) {
  GrpcCollector collector([](const Call&, std::string&, int attempt) {
    return attempt == 1 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "warming up") : grpc::Status::OK;
  });
  Telemetry t = setup_telemetry(grpc_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "retried"); }
  ASSERT_TRUE(t.shutdown());
  EXPECT_EQ(collector.calls(), 2);
  EXPECT_EQ(t.span_stats().exported, 1u);
}

std::string varint(std::uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
  return out + static_cast<char>(v);
}

// google.rpc.Status { code = 8, message = "slow down", details = [Any { RetryInfo { retry_delay { seconds } } }] }
std::string retry_info_details(std::uint64_t seconds = 1) {
  const std::string type = "type.googleapis.com/google.rpc.RetryInfo";
  const std::string duration = "\x08" + varint(seconds);
  const std::string retry_info = "\x0a" + std::string(1, static_cast<char>(duration.size())) + duration;
  std::string any = "\x0a" + std::string(1, static_cast<char>(type.size())) + type + "\x12" +
                    std::string(1, static_cast<char>(retry_info.size())) + retry_info;
  return std::string("\x08\x08\x12\x09slow down\x1a", 14) + std::string(1, static_cast<char>(any.size())) + any;
}

TEST(OtlpGrpc, ResourceExhaustedIsRetriedOnlyWithRetryInfoAfterItsDelay) {
  GrpcCollector with_info([](const Call&, std::string&, int attempt) {
    return attempt == 1 ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "slow down", retry_info_details())
                        : grpc::Status::OK;
  });
  Telemetry t = setup_telemetry(grpc_config(with_info.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "delayed"); }
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.shutdown(std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1000));  // the RetryInfo delay
  EXPECT_EQ(with_info.calls(), 2);
  EXPECT_EQ(t.span_stats().exported, 1u);

  GrpcCollector without_info(
      [](const Call&, std::string&, int) { return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "quota"); });
  t = setup_telemetry(grpc_config(without_info.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "dropped"); }
  t.shutdown();
  EXPECT_EQ(without_info.calls(), 1);
  EXPECT_EQ(t.span_stats().dropped_export_failed, 1u);
}

// A RetryInfo of 18446744074 s (its milliseconds overflow int64) or a negative one: the hint is bounded, so the
// batch is dropped at its deadline (not after centuries) or retried after the floor (not at once, in a flood).
TEST(OtlpGrpc, AHugeOrNegativeRetryInfoIsBounded) {
  for (std::uint64_t seconds : {std::uint64_t{18446744074}, std::uint64_t(-5)}) {
    GrpcCollector collector([&](const Call&, std::string&, int attempt) {
      return attempt == 1 ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "slow down", retry_info_details(seconds))
                          : grpc::Status::OK;
    });
    Config c = grpc_config(collector.port());
    c.span_batch.export_timeout_ms = 1500;
    SCOPED_TRACE(seconds);
    SpanStats s = testing::export_two_batches(c).span_stats();
    EXPECT_EQ(s.exported + s.dropped(), s.produced);
    if (seconds > (std::uint64_t{1} << 63)) {  // negative: retried after the floor, both delivered
      EXPECT_EQ(s.exported, 2u);
      EXPECT_LE(collector.calls(), 3);
    } else {  // huge: the first batch dropped at once, the second delivered
      EXPECT_EQ(s.dropped_export_failed, 1u);
      EXPECT_EQ(s.exported, 1u);
      EXPECT_EQ(collector.calls(), 2);
    }
  }
}

// Keys and values gRPC metadata cannot carry would make gRPC abort the process at the first export (and print the
// value): they are refused at setup, naming the variable and the entry, never the value. So are HTTP/2's
// connection-specific keys: a request with one is malformed.
TEST(OtlpGrpc, HeadersGrpcCannotCarryAreRefusedAtSetup) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"authorization", "Bearer TOKEN123\n"},
      {"authorization", std::string("Bearer TOKEN123\0x", 17)},
      {"authorization", "Bearer TOKEN123\r"},
      {"bad key", "TOKEN123"},
      {":authority", "TOKEN123"},
      {"grpc-timeout", "TOKEN123"},
      {"x-caf\xc3\xa9", "TOKEN123"},
      {"x", "caf\xc3\xa9 TOKEN123"},
      {"Connection", "TOKEN123"},
      {"keep-alive", "TOKEN123"},
      {"proxy-connection", "TOKEN123"},
      {"transfer-encoding", "TOKEN123"},
      {"upgrade", "TOKEN123"},
      {"te", "TOKEN123"}};
  for (const auto& header : bad) {
    Config c = grpc_config(1);
    c.otlp_traces.headers = {{"x-ok", "fine"}, header};
    std::string message = testing::setup_error(c);
    EXPECT_NE(message.find("OTEL_EXPORTER_OTLP_HEADERS"), std::string::npos) << header.first << ": " << message;
    EXPECT_NE(message.find("entry 2"), std::string::npos) << message;
    EXPECT_EQ(message.find("TOKEN123"), std::string::npos) << message;
  }
  Config binary = grpc_config(1);  // a -bin key carries any bytes
  binary.otlp_traces.headers = {{"trace-proto-bin", std::string("\0\r\n\xff", 4)}};
  EXPECT_NO_THROW(setup_telemetry(binary, {.rank = 0, .world_size = 1, .reinit = true}).shutdown());
}

TEST(OtlpGrpc, InvalidArgumentIsNotRetriedAndItsMessageIsLogged) {
  GrpcCollector collector(
      [](const Call&, std::string&, int) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad span"); });
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(grpc_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "refused"); }
  t.shutdown();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(collector.calls(), 1);
  EXPECT_NE(log.find("INVALID_ARGUMENT: bad span"), std::string::npos) << log;
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpGrpc, PartialSuccessCountsTheRejectedSpans) {
  GrpcCollector collector([](const Call&, std::string& response, int) {
    response = std::string("\x0a\x09\x08\x01\x12\x05quota", 11);  // rejected_spans = 1, error_message = "quota"
    return grpc::Status::OK;
  });
  Telemetry t = setup_telemetry(grpc_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "a"); }
  { LENS_SPAN(mg::job, "b"); }
  ASSERT_TRUE(t.shutdown());
  EXPECT_EQ(collector.calls(), 1);
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.exported, 1u);
  EXPECT_EQ(s.rejected_by_collector, 1u);
}

TEST(OtlpGrpc, AnAbsentCollectorCostsCountedDropsWithinTheDeadline) {
  Config c = grpc_config(testing::free_port());
  c.span_batch.export_timeout_ms = 1500;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "lost"); }
  auto start = std::chrono::steady_clock::now();
  t.shutdown(std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

TEST(OtlpGrpc, ACollectorThatNeverAnswersCannotHoldShutdown) {
  std::atomic<bool> release{false};
  GrpcCollector collector([&](const Call&, std::string&, int) {
    for (int i = 0; i < 100 && !release.load(); ++i) std::this_thread::sleep_for(milliseconds(50));  // bounded
    return grpc::Status::OK;
  });
  Telemetry t = setup_telemetry(grpc_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "stuck"); }
  auto start = std::chrono::steady_clock::now();
  t.shutdown(milliseconds(500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  release.store(true);
}

using testing::self_signed;

std::shared_ptr<grpc::ServerCredentials> tls_server() {
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({self_signed().key(), self_signed().cert()});
  return grpc::SslServerCredentials(options);
}

TEST(OtlpGrpc, TlsTrustedThroughTheCertificateVariableWorks) {
  ASSERT_FALSE(self_signed().cert_path.empty()) << "openssl could not make a certificate";
  GrpcCollector collector(ok, tls_server());
  Config c = grpc_config(collector.port(), "https");
  c.otlp_traces.certificate = self_signed().cert_path;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "over-tls"); }
  ASSERT_TRUE(t.shutdown());
  ASSERT_EQ(collector.calls(), 1);
  EXPECT_NE(collector.received()[0].body.find("over-tls"), std::string::npos);
}

TEST(OtlpGrpc, TlsUntrustedFailsAndNothingArrives) {
  ASSERT_FALSE(self_signed().cert_path.empty()) << "openssl could not make a certificate";
  GrpcCollector collector(ok, tls_server());
  Config c = grpc_config(collector.port(), "https");
  c.span_batch.export_timeout_ms = 1500;
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "must-not-arrive"); }
  t.shutdown(std::chrono::seconds(5));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(collector.calls(), 0);
  EXPECT_NE(log.find("UNAVAILABLE"), std::string::npos) << log;
  EXPECT_EQ(t.span_stats().dropped_export_failed, 1u);
}

}  // namespace
}  // namespace lens
