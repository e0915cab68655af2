// Certificates made at test time with the openssl command-line tool: a CA, a
// server certificate for localhost / 127.0.0.1 (subject alternative names), two
// client certificates from the same CA and one from another CA. EC P-256 keys,
// valid for a day. No key material is checked in.
#ifndef GEMM_TESTS_TEST_CERTS_H_
#define GEMM_TESTS_TEST_CERTS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gemm {
namespace test {

struct TestCerts {
  std::string dir;
  // Paths of PEM files.
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  // A second client of the same CA, with another subject (CN=gemm-test-client-2).
  std::string second_client_cert;
  std::string second_client_key;
  std::string other_ca_cert;      // a CA that signed nothing the server trusts
  std::string other_client_cert;  // signed by other_ca
  std::string other_client_key;
};

// Makes the files under `dir` (created if missing). Internal on failure, with
// the openssl command that failed.
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

// Certificates as MakeTestCerts makes them, under TestTempDir()/certs, and
// beside them a tokens file (the server's --auth_tokens_file) with one
// "caller token" line for each {caller, token} of `callers`.
struct TestCredentials {
  TestCerts certs;
  std::string tokens_file;
};
absl::StatusOr<TestCredentials> MakeTestCredentials(
    const std::vector<std::pair<std::string, std::string>>& callers);

// The directory tests should write to: $TEST_TMPDIR, else a fresh /tmp one.
std::string TestTempDir();

// The file's contents; fails the calling test (ADD_FAILURE) when unreadable.
std::string ReadTestFile(const std::string& path);

}  // namespace test
}  // namespace gemm

#endif  // GEMM_TESTS_TEST_CERTS_H_
