#include "service/caller_identity.h"

#include "service/auth.h"

namespace gemm {

std::string CallerIdentity(const grpc::CallbackServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return "";
  const std::vector<grpc::string_ref> values = auth->FindPropertyValues(kCallerAuthProperty);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

}  // namespace gemm
