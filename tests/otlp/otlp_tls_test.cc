// OTLP/HTTP over TLS against a collector of the test's own serving a self-signed certificate that `openssl` makes
// here: trusted through OTEL_EXPORTER_OTLP_*_CERTIFICATE the data arrives; untrusted, the export fails with a
// clear message and nothing reaches the collector (no fallback to clear text). Linked against the shared lens,
// so this file's TLS-enabled cpp-httplib never meets the one inside lens.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT  // Debian's cpp-httplib.pc may define it already
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "lens/lens.h"
#include "support/otlp_config.h"
#include "support/self_signed.h"
#include "support/test_collector.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::TestCollector;

using testing::self_signed;

Config tls_config(int port) {
  return testing::otlp_test_config(OtlpProtocol::kHttpProtobuf, "https://127.0.0.1:" + std::to_string(port));
}

TEST(OtlpTls, TrustedThroughTheCertificateVariableTheDataArrives) {
  ASSERT_FALSE(self_signed().cert_path.empty()) << "openssl could not make a certificate";
  TestCollector collector([](auto&, auto& response, int) { response.set_content("", "application/x-protobuf"); },
                          self_signed().cert_path, self_signed().key_path);
  Config c = tls_config(collector.port());
  c.otlp_traces.certificate = self_signed().cert_path;
  Telemetry t = setup_telemetry(c, {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "over-tls"); }
  ASSERT_TRUE(t.shutdown());
  ASSERT_EQ(collector.requests(), 1);
  EXPECT_NE(collector.received()[0].body.find("over-tls"), std::string::npos);
  EXPECT_EQ(t.span_stats().exported, 1u);
}

TEST(OtlpTls, UntrustedTheExportFailsClearlyAndNothingIsSent) {
  ASSERT_FALSE(self_signed().cert_path.empty()) << "openssl could not make a certificate";
  TestCollector collector([](auto&, auto& response, int) { response.set_content("", "application/x-protobuf"); },
                          self_signed().cert_path, self_signed().key_path);
  ::testing::internal::CaptureStderr();
  Telemetry t = setup_telemetry(tls_config(collector.port()), {.rank = 0, .world_size = 1, .reinit = true});
  { LENS_SPAN(mg::job, "must-not-arrive"); }
  t.shutdown();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(collector.requests(), 0);  // no request got past the handshake
  EXPECT_NE(log.find("certificate"), std::string::npos) << log;
  EXPECT_NE(log.find("not retried"), std::string::npos) << log;  // a trust failure is not retried
  SpanStats s = t.span_stats();
  EXPECT_EQ(s.dropped_export_failed, 1u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
}

}  // namespace
}  // namespace lens
