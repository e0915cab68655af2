#include "echo/echo_server.h"

namespace gemm::bench {

class EchoServer::Service final : public echo::v1::EchoService::CallbackService {
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const echo::v1::EchoRequest* request,
                                 echo::v1::EchoReply* reply) override {
    reply->mutable_payload()->resize(request->reply_bytes());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

EchoServer::EchoServer(int max_message_bytes,
                       const std::vector<std::pair<std::string, int>>& args)
    : service_(std::make_unique<Service>()) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  for (const auto& [name, value] : args) builder.AddChannelArgument(name, value);
  server_ = builder.BuildAndStart();
}

EchoServer::~EchoServer() {
  if (server_) server_->Shutdown();
}

}  // namespace gemm::bench
