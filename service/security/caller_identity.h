// Who is calling: the identity that scopes resident matrices
// (resident_store.h) and that fair queueing shares the queue across
// (request_queue.h).
//
// Precedence, the first that applies:
//   1. the bearer-token caller (auth.h sets kCallerAuthProperty from the
//      token), e.g. "alice";
//   2. the client certificate of a mutual-TLS connection: "x509:" and its
//      subject distinguished name as gRPC reports it (RFC 2253 form, e.g.
//      "x509:CN=build-bot,O=Example"); a certificate without a subject is
//      named by its SHA-256 instead ("x509-sha256:<hex>");
//   3. "": anonymous. Every anonymous caller shares one scope (handles are
//      still unguessable).
//
// Why the token comes first: the tokens file is the operator's explicit list
// of callers, and it is the finer grain. A client certificate often names a
// host, a pod or a proxy that carries several tenants' calls, each with its
// own token; the certificate then says which machine is calling, the token
// who. With mutual TLS and no tokens file the certificate is all there is.
// Why the subject and not the whole certificate: the subject is the
// principal the CA vouches for and survives certificate renewal, so handles
// stay usable across a rotation. The CAs in --tls_client_ca must therefore
// not give one subject to two different principals (one CA never does; with
// several CAs in the bundle, keep their subjects apart).
// Why the prefix: token caller names are [A-Za-z0-9._@-]+ (no ':'), so a
// certificate identity can never equal a token caller's, whatever its CN.
//
// Only a verified certificate may count: transport_security.cc requests a
// client certificate only together with verifying it, so any certificate in
// the auth context is one the CA bundle signed.
#ifndef GEMM_SERVICE_SECURITY_CALLER_IDENTITY_H_
#define GEMM_SERVICE_SECURITY_CALLER_IDENTITY_H_

#include <string>

#include <grpcpp/grpcpp.h>

namespace gemm {

// The identity (see above) from a call's or connection's auth context;
// "" for a null one.
std::string CallerIdentity(const grpc::AuthContext* auth);

// The same for a call. Call it from a handler: the context creates its auth
// context lazily, which is not thread-safe.
std::string CallerIdentity(const grpc::CallbackServerContext& context);

}  // namespace gemm

#endif  // GEMM_SERVICE_SECURITY_CALLER_IDENTITY_H_
