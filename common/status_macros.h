// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status code. The Abseil in
// Debian 12 (20220623) predates Abseil's own macros, hence the GEMM_ prefix.
#ifndef GEMM_COMMON_STATUS_MACROS_H_
#define GEMM_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GEMM_RETURN_IF_ERROR(expr)                \
  do {                                            \
    const ::absl::Status gemm_status_ = (expr);   \
    if (!gemm_status_.ok()) return gemm_status_;  \
  } while (0)

#define GEMM_STATUS_CONCAT_INNER_(a, b) a##b
#define GEMM_STATUS_CONCAT_(a, b) GEMM_STATUS_CONCAT_INNER_(a, b)

#define GEMM_ASSIGN_OR_RETURN(lhs, expr) \
  GEMM_ASSIGN_OR_RETURN_IMPL_(GEMM_STATUS_CONCAT_(gemm_statusor_, __LINE__), lhs, expr)

#define GEMM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // GEMM_COMMON_STATUS_MACROS_H_
