// Throwaway X.509 material for TLS tests, made with Debian's `openssl`
// command at test time: nothing secret or expiring is checked in.
#ifndef GPUSTREAM_TESTS_TEST_CERTS_H_
#define GPUSTREAM_TESTS_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpustream::testing {

// A certificate and its private key, as PEM file paths.
struct CertFiles {
  std::string cert;
  std::string key;
};

// Paths of PEM files in one directory. Keys are unencrypted P-256.
struct TestCerts {
  std::string ca_cert;  // The CA (CN=gpustream test CA) that signs the rest.
  CertFiles server;     // SANs IP:127.0.0.1, DNS:localhost; serverAuth.
  CertFiles alice;      // Subject CN=alice; clientAuth.
  CertFiles mallory;    // Subject CN=mallory; clientAuth.
  // Self-signed, not from the CA, claiming subject CN=alice; clientAuth.
  CertFiles rogue_alice;
};

// Generates TestCerts into `dir` (which must exist), valid for two days.
// The error carries openssl's output.
absl::StatusOr<TestCerts> GenerateTestCerts(const std::string& dir);

// The contents of `path` ("" when unreadable).
std::string ReadTextFile(const std::string& path);

}  // namespace gpustream::testing

#endif  // GPUSTREAM_TESTS_TEST_CERTS_H_
