// Test certificates from the openssl command line tool.
#include "tests/test_certs.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "tests/daemon_process.h"

namespace gpustream::testing {
namespace {

// posix_spawn does not search PATH; Debian's openssl package puts it here.
constexpr char kOpenssl[] = "/usr/bin/openssl";

// Extensions for each kind of certificate. The CA is a real CA
// (basicConstraints CA:TRUE, keyCertSign), leaves are not, and each leaf
// says what it is for, so a verifier that checks purposes (OpenSSL does)
// accepts exactly the intended use.
constexpr char kConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[self_client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
)";

absl::Status Openssl(std::vector<std::string> args) {
  args.insert(args.begin(), kOpenssl);
  std::string output;
  const int status = RunCommand(args, &output, absl::Seconds(60));
  if (status == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "`", absl::StrJoin(args, " "), "` exited with ", status, ": ", output));
}

absl::Status NewKey(const std::string& path) {
  return Openssl({"genpkey", "-algorithm", "EC", "-pkeyopt",
                  "ec_paramgen_curve:P-256", "-out", path});
}

// A key and a certificate for `subject`, signed by the CA in `dir`.
absl::StatusOr<CertFiles> Leaf(const std::string& dir, const std::string& name,
                               const std::string& subject,
                               const std::string& extensions, int serial) {
  CertFiles files{absl::StrCat(dir, "/", name, ".pem"),
                  absl::StrCat(dir, "/", name, ".key")};
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  const std::string config = absl::StrCat(dir, "/openssl.cnf");
  if (absl::Status s = NewKey(files.key); !s.ok()) return s;
  if (absl::Status s = Openssl({"req", "-new", "-key", files.key, "-subj",
                                subject, "-config", config, "-out", csr});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Openssl(
          {"x509", "-req", "-in", csr, "-CA", absl::StrCat(dir, "/ca.pem"),
           "-CAkey", absl::StrCat(dir, "/ca.key"), "-set_serial",
           absl::StrCat(serial), "-days", "2", "-extfile", config,
           "-extensions", extensions, "-out", files.cert});
      !s.ok()) {
    return s;
  }
  return files;
}

}  // namespace

absl::StatusOr<TestCerts> GenerateTestCerts(const std::string& dir) {
  const std::string config = absl::StrCat(dir, "/openssl.cnf");
  if (!(std::ofstream(config) << kConfig)) {
    return absl::InternalError(absl::StrCat("cannot write ", config));
  }
  TestCerts certs;
  certs.ca_cert = absl::StrCat(dir, "/ca.pem");
  const std::string ca_key = absl::StrCat(dir, "/ca.key");
  if (absl::Status s = NewKey(ca_key); !s.ok()) return s;
  if (absl::Status s =
          Openssl({"req", "-new", "-x509", "-key", ca_key, "-subj",
                   "/CN=gpustream test CA", "-days", "2", "-config", config,
                   "-extensions", "ca_ext", "-out", certs.ca_cert});
      !s.ok()) {
    return s;
  }
  auto server = Leaf(dir, "server", "/CN=localhost", "server_ext", 1);
  if (!server.ok()) return server.status();
  certs.server = *server;
  auto alice = Leaf(dir, "alice", "/CN=alice", "client_ext", 2);
  if (!alice.ok()) return alice.status();
  certs.alice = *alice;
  auto mallory = Leaf(dir, "mallory", "/CN=mallory", "client_ext", 3);
  if (!mallory.ok()) return mallory.status();
  certs.mallory = *mallory;
  // The impostor: alice's name, but its own signature.
  certs.rogue_alice = {absl::StrCat(dir, "/rogue.pem"),
                       absl::StrCat(dir, "/rogue.key")};
  if (absl::Status s = NewKey(certs.rogue_alice.key); !s.ok()) return s;
  if (absl::Status s = Openssl(
          {"req", "-new", "-x509", "-key", certs.rogue_alice.key, "-subj",
           "/CN=alice", "-days", "2", "-config", config, "-extensions",
           "self_client_ext", "-out", certs.rogue_alice.cert});
      !s.ok()) {
    return s;
  }
  return certs;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace gpustream::testing
