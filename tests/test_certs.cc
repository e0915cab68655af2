#include "tests/test_certs.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace gemm {
namespace test {
namespace {

absl::Status Run(const std::string& command) {
  const std::string quiet = absl::StrCat(command, " >/dev/null 2>&1");
  if (std::system(quiet.c_str()) != 0)
    return absl::InternalError(absl::StrCat("failed: ", command));
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return out ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

constexpr char kKeyArgs[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(absl::StrCat("openssl req -x509 ", kKeyArgs, " -days 1 -subj '/CN=gemm test ", name,
                          "' -addext basicConstraints=critical,CA:TRUE",
                          " -addext keyUsage=critical,keyCertSign,cRLSign -keyout ", dir, "/",
                          name, ".key -out ", dir, "/", name, ".pem"));
}

// A leaf certificate `name`.pem / `name`.key signed by `ca`, with the
// extensions in `ext` (an openssl extension-file body).
absl::Status MakeLeaf(const std::string& dir, const std::string& name, const std::string& ca,
                      const std::string& cn, const std::string& ext) {
  const std::string p = absl::StrCat(dir, "/", name);
  if (absl::Status s = WriteFile(p + ".ext", ext); !s.ok()) return s;
  if (absl::Status s = Run(absl::StrCat("openssl req ", kKeyArgs, " -subj '/CN=", cn,
                                        "' -keyout ", p, ".key -out ", p, ".csr"));
      !s.ok())
    return s;
  return Run(absl::StrCat("openssl x509 -req -days 1 -in ", p, ".csr -CA ", dir, "/", ca,
                          ".pem -CAkey ", dir, "/", ca, ".key -CAcreateserial -out ", p,
                          ".pem -extfile ", p, ".ext"));
}

}  // namespace

std::string TestTempDir() {
  if (const char* t = std::getenv("TEST_TMPDIR"); t != nullptr && *t != '\0') return t;
  char tmpl[] = "/tmp/gemm_test_XXXXXX";
  const char* made = mkdtemp(tmpl);
  return made != nullptr ? made : "/tmp";
}

std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  mkdir(dir.c_str(), 0700);
  constexpr char kServerExt[] =
      "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
      "keyUsage=critical,digitalSignature\n";
  constexpr char kClientExt[] = "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n";
  for (absl::Status s : {MakeCa(dir, "ca"), MakeCa(dir, "other_ca"),
                         MakeLeaf(dir, "server", "ca", "localhost", kServerExt),
                         MakeLeaf(dir, "client", "ca", "gemm-test-client", kClientExt),
                         MakeLeaf(dir, "second_client", "ca", "gemm-test-client-2", kClientExt),
                         MakeLeaf(dir, "other_client", "other_ca", "intruder", kClientExt)}) {
    if (!s.ok()) return s;
  }
  TestCerts c;
  c.dir = dir;
  c.ca_cert = dir + "/ca.pem";
  c.server_cert = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/client.pem";
  c.client_key = dir + "/client.key";
  c.second_client_cert = dir + "/second_client.pem";
  c.second_client_key = dir + "/second_client.key";
  c.other_ca_cert = dir + "/other_ca.pem";
  c.other_client_cert = dir + "/other_client.pem";
  c.other_client_key = dir + "/other_client.key";
  return c;
}

absl::StatusOr<TestCredentials> MakeTestCredentials(
    const std::vector<std::pair<std::string, std::string>>& callers) {
  const std::string dir = TestTempDir() + "/certs";
  absl::StatusOr<TestCerts> certs = MakeTestCerts(dir);
  if (!certs.ok()) return certs.status();
  TestCredentials made{*std::move(certs), dir + "/tokens"};
  std::ofstream tokens(made.tokens_file);
  tokens << "# caller token\n";
  for (const auto& [caller, token] : callers) tokens << caller << " " << token << "\n";
  if (!tokens.good()) return absl::InternalError("cannot write " + made.tokens_file);
  return made;
}

}  // namespace test
}  // namespace gemm
