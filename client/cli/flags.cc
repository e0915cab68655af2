#include "client/cli/flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "Server: host:port; replicas: dns:///name:port (every address the name resolves "
          "to) or ipv4:host:port,host:port,... Each request's calls stay on one replica");
ABSL_FLAG(std::string, replica_policy, "least_outstanding",
          "How requests pick a replica: least_outstanding (fewest in flight) or round_robin");
ABSL_FLAG(bool, tls, false, "Speak TLS, verifying the server against the system's roots");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle to verify the server with (implies --tls)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers that require mTLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token, "",
          "Bearer token sent with every call (visible in the process list: prefer --token_file)");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token (surrounding spaces dropped)");
ABSL_FLAG(int64_t, deadline_ms, 60000, "Deadline of each call, in ms");
ABSL_FLAG(int, max_attempts, 5, "Attempts per call on UNAVAILABLE/RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, m, 256, "Rows of op(A) and of the result");
ABSL_FLAG(uint64_t, n, 256, "Columns of op(B) and of the result");
ABSL_FLAG(uint64_t, k, 256, "Inner dimension");
ABSL_FLAG(std::string, dtype, "fp32", "Input type: fp32, fp16, bf16, fp8_e4m3 or fp8_e5m2");
ABSL_FLAG(std::string, b_dtype, "",
          "Type of B when it differs from --dtype (FP8 formats may mix: --dtype=fp8_e4m3 "
          "--b_dtype=fp8_e5m2); empty = --dtype");
ABSL_FLAG(std::string, scale, "tensor",
          "FP8 inputs: scale mode of both operands, tensor, channel or block (1 x 128 blocks of "
          "A, 128 x 128 of B; any K, the last block along K partial); the CLI quantizes its "
          "random data with these scales");
ABSL_FLAG(std::string, out_dtype, "",
          "Output type (fp32, fp16, bf16); empty = the input type, fp32 for FP8 inputs");
ABSL_FLAG(bool, transpose_a, false, "Use A^T (A stored K x M)");
ABSL_FLAG(bool, transpose_b, false, "Use B^T (B stored N x K)");
ABSL_FLAG(std::string, layout, "row", "Layout of A, B and C: row or col");
ABSL_FLAG(std::string, out_layout, "row", "Layout of the result: row or col");
ABSL_FLAG(double, alpha, 1.0, "alpha");
ABSL_FLAG(double, beta, 0.0, "beta; non-zero sends a random C");
ABSL_FLAG(bool, allow_tf32, false, "Let fp32 inputs run on TF32 tensor cores");
ABSL_FLAG(int, batch, 1, "Problems per request");
ABSL_FLAG(bool, deterministic, false,
          "run/bench: ask for batch-invariant results (GemmRequest.deterministic); run prints "
          "what fixed the bits");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the random inputs");
ABSL_FLAG(int, concurrency, 8, "bench: requests in flight");
ABSL_FLAG(double, duration_s, 10.0, "bench: how long to run, unless --requests is set");
ABSL_FLAG(int64_t, requests, 0, "bench: stop after this many requests (0 = use --duration_s)");
ABSL_FLAG(bool, resident_b, false,
          "bench: register each problem's B on the server once (RegisterMatrix) and send only "
          "its handle");
ABSL_FLAG(int64_t, verify_every, 0, "bench: check every N-th response against the reference (0 = never)");
ABSL_FLAG(int64_t, max_consecutive_failures, 20,
          "bench: stop early after this many failed calls in a row (0 = never stop early)");
ABSL_FLAG(bool, stream, false,
          "bench: send the requests over one GemmStream (--concurrency in flight) instead of "
          "unary calls");
ABSL_FLAG(bool, shared_memory, false,
          "run, bench: operands and results in same-host shared memory instead of gRPC "
          "messages (the server on this host, reached over loopback or a Unix socket); the "
          "bytes go in messages when the server refuses the region");
ABSL_FLAG(bool, json, false, "bench: print one JSON document with the figures instead of text");
ABSL_FLAG(std::string, sizes, "",
          "bench: a sweep, comma-separated square sizes (--sizes=256,512,1024 runs M=N=K=256, "
          "then 512, ...); empty = one run of --m/--n/--k");
ABSL_FLAG(uint64_t, max_client_bytes, 0,
          "Most bytes of operands and references the CLI may allocate (0 = half of this "
          "machine's memory); larger shapes are refused before anything is allocated");
