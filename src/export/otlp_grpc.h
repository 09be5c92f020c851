// OTLP over gRPC with the gRPC C++ library: unary Export calls of opentelemetry.proto.collector.<signal>.v1.
// <Signal>Service, the request's protobuf bytes sent through gRPC's generic (byte-buffer) stub, so no generated
// code and no libprotobuf at run time. Headers go as metadata, the timeout is the call's deadline, gzip is gRPC's
// message compression, TLS from the endpoint's scheme (https) or, without one, OTEL_EXPORTER_OTLP_INSECURE=false.
// Retried codes (OTLP exporter specification): CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE,
// DATA_LOSS, and RESOURCE_EXHAUSTED when the server sent a RetryInfo (whose delay is then honoured).
// Built only where gRPC was found (LENS_HAVE_GRPC).
#pragma once

#include <memory>
#include <string>

#include "export/otlp_channel.h"

namespace lens::internal {

// Where a signal is sent: "host:port", and whether over TLS. Default http://localhost:4317.
struct GrpcTarget {
  std::string address;
  bool tls = false;
};
GrpcTarget otlp_grpc_target(const OtlpSignalConfig& settings);

std::unique_ptr<OtlpChannel> make_otlp_grpc_channel(const OtlpSignalConfig& settings, const OtlpSignal& signal);

}  // namespace lens::internal
