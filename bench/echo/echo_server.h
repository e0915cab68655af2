// The plain gRPC echo the benchmarks measure the service against: it answers
// each request with `reply_bytes` bytes and does nothing else, so its rate is
// what gRPC itself moves on this machine.
#ifndef GEMM_BENCH_ECHO_ECHO_SERVER_H_
#define GEMM_BENCH_ECHO_ECHO_SERVER_H_

#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "echo/v1/echo.grpc.pb.h"

namespace gemm::bench {

class EchoServer {
 public:
  // Listens on 127.0.0.1 (a free port) with `max_message_bytes` both ways and
  // the extra channel arguments given.
  explicit EchoServer(int max_message_bytes,
                      const std::vector<std::pair<std::string, int>>& args = {});
  ~EchoServer();
  int port() const { return port_; }

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace gemm::bench

#endif  // GEMM_BENCH_ECHO_ECHO_SERVER_H_
