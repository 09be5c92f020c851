#include "export/otlp_grpc.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cctype>
#include <chrono>
#include <string_view>
#include <vector>

#include "common/text.h"
#include "lens/version.h"

namespace lens::internal {

namespace {

const char* code_name(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  auto index = static_cast<std::size_t>(code);
  return index < std::size(kNames) ? kNames[index] : "UNKNOWN";
}

Attempt::Outcome outcome_of(const grpc::Status& status, bool has_retry_info) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK: return Attempt::Outcome::kDelivered;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DATA_LOSS: return Attempt::Outcome::kRetryable;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return has_retry_info ? Attempt::Outcome::kRetryable : Attempt::Outcome::kRefused;
    default: return Attempt::Outcome::kRefused;
  }
}

class GrpcChannel final : public OtlpChannel {
 public:
  GrpcChannel(const OtlpSignalConfig& settings, const OtlpSignal& signal, GrpcTarget target)
      : OtlpChannel(settings, signal, (target.tls ? "https://" : "http://") + target.address),
        target_(std::move(target)),
        method_(signal.grpc_method) {
    if (target_.tls) {
      grpc::SslCredentialsOptions tls;
      if (!settings.certificate.empty()) tls.pem_root_certs = read_tls_file(settings.certificate, "CERTIFICATE");
      if (!settings.client_key.empty()) tls.pem_private_key = read_tls_file(settings.client_key, "CLIENT_KEY");
      if (!settings.client_certificate.empty())
        tls.pem_cert_chain = read_tls_file(settings.client_certificate, "CLIENT_CERTIFICATE");
      credentials_ = grpc::SslCredentials(tls);
    } else {
      credentials_ = grpc::InsecureChannelCredentials();
    }
    for (const auto& [k, v] : settings.headers) metadata_.emplace_back(to_lower(k), v);  // gRPC keys are lowercase
  }
  ~GrpcChannel() override {
    close();
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  void close() override {
    stub_.reset();
    channel_.reset();
  }

 protected:
  Attempt attempt(std::string_view payload, std::chrono::milliseconds timeout) override {
    connect();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    for (const auto& [k, v] : metadata_) context.AddMetadata(k, v);
    grpc::Slice slice(payload.data(), payload.size());
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    auto call = stub_->PrepareUnaryCall(&context, method_, request, &queue_);
    call->StartCall();
    call->Finish(&response, &status, this);
    void* tag = nullptr;
    bool ok = false;
    queue_.Next(&tag, &ok);  // the deadline bounds the wait

    RpcStatus details = parse_rpc_status_proto(status.error_details());
    Attempt a;
    a.outcome = outcome_of(status, details.retry_delay.has_value());
    a.retry_after = details.retry_delay;
    if (a.outcome == Attempt::Outcome::kDelivered) {
      a.partial = parse_partial_success_proto(bytes_of(response));
    } else {
      a.error = std::string(code_name(status.error_code())) + ": " + printable_excerpt(status.error_message());
    }
    return a;
  }

 private:
  // The channel is made on the background thread at the first export, so gRPC's own threads start there (with
  // the signals that thread blocks) and a rank that never exports never starts them.
  void connect() {
    if (stub_) return;
    grpc::ChannelArguments args;
    args.SetUserAgentPrefix("lens/" LENS_VERSION_STRING);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);  // lens retries by the OTLP rules, with its deadline
    // gRPC's own reconnection backs off to 120 s: a Collector restarted after a few failed connections would get
    // nothing for up to two minutes (every attempt failing fast as UNAVAILABLE). Bounded like lens's retries.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
    // An OTLP response is a few bytes: a collector's larger answer is refused by gRPC, not held in memory.
    args.SetMaxReceiveMessageSize(64 * 1024);
    if (settings_.compression == Compression::kGzip) args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
    channel_ = grpc::CreateCustomChannel(target_.address, credentials_, args);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  static std::string bytes_of(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    std::string out;
    if (!buffer.Dump(&slices).ok()) return out;
    for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return out;
  }

  GrpcTarget target_;
  std::string method_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::CompletionQueue queue_;
};

}  // namespace

GrpcTarget otlp_grpc_target(const OtlpSignalConfig& settings) {
  std::string endpoint = settings.endpoint.empty() ? "http://localhost:4317" : settings.endpoint;
  GrpcTarget target{endpoint, !settings.insecure};
  for (auto [scheme, tls] : {std::pair{"http://", false}, std::pair{"https://", true}}) {
    if (endpoint.starts_with(scheme)) {
      target = {endpoint.substr(std::string_view(scheme).size()), tls};
      break;
    }
  }
  // No path, query or fragment; and no credentials (an endpoint set in code: the environment's are refused at
  // setup), which gRPC's resolver would take as part of the host name and log.
  if (auto end = target.address.find_first_of("/?#"); end != std::string::npos) target.address.resize(end);
  if (auto at = target.address.rfind('@'); at != std::string::npos) target.address.erase(0, at + 1);
  return target;
}

std::unique_ptr<OtlpChannel> make_otlp_grpc_channel(const OtlpSignalConfig& settings, const OtlpSignal& signal) {
  return std::make_unique<GrpcChannel>(settings, signal, otlp_grpc_target(settings));
}

}  // namespace lens::internal
