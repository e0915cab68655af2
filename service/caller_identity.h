// Who is calling, for scoping resident matrices (resident_store.h).
#ifndef GEMM_SERVICE_CALLER_IDENTITY_H_
#define GEMM_SERVICE_CALLER_IDENTITY_H_

#include <string>

#include <grpcpp/grpcpp.h>

namespace gemm {

// The caller's identity: the value of kCallerAuthProperty (auth.h: the
// bearer-token check sets it from the token) in the call's auth
// context, or "" when the call carries none (every anonymous caller shares
// one scope; handles are still unguessable). Call it from a handler: the
// context creates its auth context lazily, which is not thread-safe.
std::string CallerIdentity(const grpc::CallbackServerContext& context);

}  // namespace gemm

#endif  // GEMM_SERVICE_CALLER_IDENTITY_H_
