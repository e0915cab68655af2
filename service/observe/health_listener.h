// HealthListener: a second gRPC port that serves grpc.health.v1.Health and
// nothing else, plaintext and without tokens. Kubernetes' built-in gRPC
// probes cannot speak TLS or send a token, so with TLS or tokens on the main
// port they need a port of their own; this is it. It registers no other
// service and strips every server-builder plugin (reflection among them), so
// a connection to it can reach only Health/Check and Health/Watch, whose
// answers say whether the server is serving and nothing more.
//
// It holds no status of its own: GemmServer sets it together with the main
// port's health (GemmServer::SetServing), so both ports always agree.
#ifndef GEMM_SERVICE_OBSERVE_HEALTH_LISTENER_H_
#define GEMM_SERVICE_OBSERVE_HEALTH_LISTENER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc {
class CallbackGenericService;
class Server;
}  // namespace grpc

namespace gemm {

struct HealthListenerOptions {
  // host:port; port 0 picks a free port (see HealthListener::port).
  std::string listen_address;
  // Largest message either way. A health request carries only a service
  // name, so anything much larger is not a probe.
  int max_message_bytes = 4096;

  // InvalidArgument naming the field.
  absl::Status Validate() const;
};

class HealthListener {
 public:
  // Listens on options.listen_address and reports every name in `services`
  // (the server as a whole is "") as NOT_SERVING until SetServing(true).
  static absl::StatusOr<std::unique_ptr<HealthListener>> Start(
      const HealthListenerOptions& options, std::vector<std::string> services);
  ~HealthListener();

  int port() const { return port_; }

  // Sets every service's status. Thread-safe; no effect after Shutdown.
  void SetServing(bool serving);

  // Closes the port; open Watch streams end. Idempotent.
  void Shutdown();

 private:
  HealthListener() = default;

  std::vector<std::string> services_;
  // Answers every method but the health service's UNIMPLEMENTED. Outlives
  // server_.
  std::unique_ptr<grpc::CallbackGenericService> unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_HEALTH_LISTENER_H_
