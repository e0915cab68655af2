#include "client/cli/size_check.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace gemm::cli {
namespace {

// a * b, or nullopt on overflow.
std::optional<uint64_t> Mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<uint64_t> Add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// "--m, --n, --k and --batch", or "--sizes and --batch" for a sweep.
std::string SizeFlags(const Shape& s) {
  if (absl::string_view(s.m_flag) == s.n_flag && absl::string_view(s.n_flag) == s.k_flag) {
    return absl::StrCat(s.m_flag, " and --batch");
  }
  return absl::StrCat(s.m_flag, ", ", s.n_flag, ", ", s.k_flag, " and --batch");
}

std::string Source(bool from_server) {
  return from_server ? "the server's limit" : "the CLI's local limit";
}

}  // namespace

v1::Limits LocalLimits() {
  v1::Limits l;
  l.set_max_dimension(0x7fffffffu);
  return l;  // the other limits 0 = not checked
}

absl::StatusOr<uint64_t> ClientBytes(const Shape& s) {
  const auto overflow = [&s] {
    return absl::OutOfRangeError(
        absl::StrCat(SizeFlags(s), ": the operand bytes overflow 64 bits"));
  };
  const std::optional<uint64_t> a = Mul(s.m, s.k), b = Mul(s.k, s.n), c = Mul(s.m, s.n);
  if (!a || !b || !c) return overflow();
  // Per problem: A and B (and C) encoded, twice (the request and its copy).
  std::optional<uint64_t> per = Add(*a, *b);
  if (!per) return overflow();
  per = Mul(*per, s.in_bytes);
  if (!per) return overflow();
  if (s.with_c) {
    const std::optional<uint64_t> cb = Mul(*c, s.out_bytes);
    per = cb ? Add(*per, *cb) : std::nullopt;
    if (!per) return overflow();
  }
  per = Mul(*per, 2);
  if (!per) return overflow();
  if (s.references) {
    const std::optional<uint64_t> ref = Mul(*c, sizeof(double));
    per = ref ? Add(*per, *ref) : std::nullopt;
    if (!per) return overflow();
  }
  std::optional<uint64_t> total = Mul(*per, static_cast<uint64_t>(s.batch));
  if (!total) return overflow();
  // The float staging of the largest single matrix, freed per problem.
  const uint64_t largest = std::max({*a, *b, *c});
  const std::optional<uint64_t> staging = Mul(largest, sizeof(float) + s.in_bytes);
  total = staging ? Add(*total, *staging) : std::nullopt;
  if (!total) return overflow();
  return *total;
}

absl::Status CheckShape(const Shape& s, const v1::Limits& limits, uint64_t client_budget,
                        bool from_server) {
  if (s.batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  const struct {
    const char* flag;
    uint64_t value;
  } dims[] = {{s.m_flag, s.m}, {s.n_flag, s.n}, {s.k_flag, s.k}};
  for (const auto& d : dims) {
    if (d.value == 0) return absl::InvalidArgumentError(absl::StrCat(d.flag, " must be >= 1"));
    if (limits.max_dimension() > 0 && d.value > limits.max_dimension()) {
      return absl::OutOfRangeError(absl::StrCat(d.flag, "=", d.value, " exceeds ",
                                                Source(from_server), " of ",
                                                limits.max_dimension(), " (max_dimension)"));
    }
  }
  if (limits.max_problems_per_request() > 0 &&
      static_cast<uint64_t>(s.batch) > limits.max_problems_per_request()) {
    return absl::OutOfRangeError(absl::StrCat("--batch=", s.batch, " exceeds ", Source(from_server),
                                              " of ", limits.max_problems_per_request(),
                                              " problems per request"));
  }
  if (limits.max_problem_bytes() > 0) {
    // Every matrix of a problem must fit in max_problem_bytes on its own.
    const struct {
      const char* name;
      const char* dims;
      std::optional<uint64_t> elems;
      uint64_t size;
    } mats[] = {{"A", "m x k", Mul(s.m, s.k), s.in_bytes},
                {"B", "k x n", Mul(s.k, s.n), s.in_bytes},
                {"the result", "m x n", Mul(s.m, s.n), s.out_bytes}};
    for (const auto& x : mats) {
      const std::optional<uint64_t> bytes = x.elems ? Mul(*x.elems, x.size) : std::nullopt;
      if (!bytes || *bytes > limits.max_problem_bytes()) {
        return absl::OutOfRangeError(absl::StrCat(
            x.name, " (", x.dims, " of ", SizeFlags(s), ") is ",
            bytes ? absl::StrCat(*bytes, " bytes") : std::string("over 2^64 bytes"), ", over ",
            Source(from_server), " of ", limits.max_problem_bytes(),
            " bytes per matrix (max_problem_bytes)"));
      }
    }
  }
  absl::StatusOr<uint64_t> held = ClientBytes(s);
  if (!held.ok()) return held.status();
  if (client_budget > 0 && *held > client_budget) {
    return absl::OutOfRangeError(absl::StrCat(
        SizeFlags(s), " need ", *held, " bytes of client memory, over --max_client_bytes=",
        client_budget));
  }
  return absl::OkStatus();
}

uint64_t DefaultClientBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{4} << 30;
  return static_cast<uint64_t>(pages) / 2 * static_cast<uint64_t>(page);
}

}  // namespace gemm::cli
