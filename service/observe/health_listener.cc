#include "service/observe/health_listener.h"

#include <chrono>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gemm {

namespace {

// Drops the plugins every ServerBuilder in the process is born with. Once
// gRPC's reflection plugin is registered (server.cc does so, and the library
// itself at load time), every builder adds ServerReflection, which would put
// the main port's service descriptions on this one.
class NoPluginsOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

}  // namespace

absl::Status HealthListenerOptions::Validate() const {
  if (listen_address.empty())
    return absl::InvalidArgumentError("health listen_address is empty");
  if (max_message_bytes < 64)
    return absl::InvalidArgumentError(
        absl::StrCat("health max_message_bytes must be at least 64, got ", max_message_bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HealthListener>> HealthListener::Start(
    const HealthListenerOptions& options, std::vector<std::string> services) {
  GEMM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<HealthListener> h(new HealthListener);
  h->services_ = std::move(services);
  // The health service is gRPC's default one, which every server built with
  // this switch on gets when it starts.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<NoPluginsOption>());
  // The base generic service finishes every call it gets UNIMPLEMENTED; it
  // takes the methods no service registered (all but Health's). gRPC also
  // refuses to build a server with no service of its own, and the default
  // health service is added only after that check.
  h->unimplemented_ = std::make_unique<grpc::CallbackGenericService>();
  builder.RegisterCallbackGenericService(h->unimplemented_.get());
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(), &h->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // One listener per port, as on the main port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  h->server_ = builder.BuildAndStart();
  if (h->server_ == nullptr || h->port_ == 0)
    return absl::UnavailableError(absl::StrCat("could not listen for health checks on ",
                                               options.listen_address,
                                               " (is the port already in use?)"));
  h->SetServing(false);
  return h;
}

void HealthListener::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  for (const std::string& service : services_) {
    if (service.empty()) {
      health->SetServingStatus(serving);
    } else {
      health->SetServingStatus(service, serving);
    }
  }
}

void HealthListener::Shutdown() {
  if (server_ == nullptr) return;
  // No deadline to wait for: health calls are answered at once, and open
  // Watch streams are ended rather than waited for.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

HealthListener::~HealthListener() { Shutdown(); }

}  // namespace gemm
