#ifndef GEMM_SERVICE_VERSION_H_
#define GEMM_SERVICE_VERSION_H_

namespace gemm {

// The service's version, reported by GetServerInfo and the build-info metric.
inline constexpr char kVersion[] = "0.1.0";

}  // namespace gemm

#endif  // GEMM_SERVICE_VERSION_H_
