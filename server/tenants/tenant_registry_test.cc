#include "server/tenants/tenant_registry.h"

#include <google/protobuf/text_format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "gtest/gtest.h"
#include "server/tenants/operator_token.h"

namespace gpustream::tenants {
namespace {

v1::ServerConfig Config(const std::string& text) {
  v1::ServerConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config));
  return config;
}

Credentials Token(std::string token) { return {std::move(token), {}}; }

TEST(TenantRegistryTest, WithoutTenantsEveryCallerIsTheNonAdminDefault) {
  auto registry = TenantRegistry::Create({});
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto who = (*registry)->Authenticate({});
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->name(), "default");
  EXPECT_FALSE(who->admin());
  EXPECT_EQ((*registry)->RequireAdmin(*who, "KillSession").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE((*registry)->configured());
}

// The operator token authenticates an admin with tenants and without, and
// survives reloads; any other token is unchanged in meaning.
TEST(TenantRegistryTest, OperatorTokenIsTheLocalOperatorsAdminCredential) {
  auto bare = TenantRegistry::Create({});
  ASSERT_TRUE(bare.ok());
  (*bare)->EnableOperatorToken("op-secret", "/run/x.sock.operator-token");
  auto op = (*bare)->Authenticate(Token("op-secret"));
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->name(), "local-operator");
  EXPECT_TRUE(op->admin());
  EXPECT_EQ((*bare)->Authenticate(Token("op-secreT"))->name(), "default");
  const absl::Status denied =
      (*bare)->RequireAdmin(*(*bare)->Authenticate({}), "GetStats");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("/run/x.sock.operator-token"),
            std::string::npos)
      << denied;

  const v1::ServerConfig config = Config(
      "tenants { name: 'alice' token_sha256: '" + Sha256Hex("a") + "' }");
  auto with = TenantRegistry::Create(config);
  ASSERT_TRUE(with.ok());
  (*with)->EnableOperatorToken("op-secret", "/p");
  ASSERT_TRUE((*with)->Reload(config).ok());
  EXPECT_TRUE((*with)->Authenticate(Token("op-secret"))->admin());
  EXPECT_EQ((*with)->Authenticate(Token("a"))->name(), "alice");
  EXPECT_EQ((*with)->All().size(), 1u);  // Not among the fair shares.
  ASSERT_NE((*with)->Operator(), nullptr);
  EXPECT_EQ((*with)->Operator()->name(), "local-operator");

  auto reserved =
      TenantRegistry::Create(Config("tenants { name: 'local-operator' }"));
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(reserved.status().message().find("reserved"), std::string::npos);
}

// The token file is created 0600, replaces only a stale file of this user,
// never follows or removes what another put there, and at exit removes
// only the file it wrote.
TEST(OperatorTokenFileTest, WritesPrivatelyAndRemovesOnlyItsOwn) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string path = dir + "/d.sock.operator-token";
  const std::string token = OperatorTokenFile::NewToken();
  EXPECT_EQ(token.size(), 64u);
  EXPECT_NE(token, OperatorTokenFile::NewToken());
  {
    auto file = OperatorTokenFile::Write(path, token);
    ASSERT_TRUE(file.ok()) << file.status();
    struct stat st;
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    std::ifstream in(path);
    std::string read;
    std::getline(in, read);
    EXPECT_EQ(read, token);
    // A stale file of ours (a daemon that died) is replaced.
    auto again = OperatorTokenFile::Write(path, OperatorTokenFile::NewToken());
    ASSERT_TRUE(again.ok()) << again.status();
    // `file` no longer owns what is at the path: its end leaves it.
    { OperatorTokenFile first = *std::move(file); }
    EXPECT_EQ(access(path.c_str(), F_OK), 0)
        << "removed a file it did not write";
    { OperatorTokenFile second = *std::move(again); }
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "left its own file behind";
  }

  // A symlink planted at the path is refused and stays; so is a file with
  // group or other bits.
  const std::string target = dir + "/elsewhere";
  std::ofstream(target) << "secret\n";
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  auto refused = OperatorTokenFile::Write(path, token);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(path), std::string::npos);
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  std::ifstream in(target);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "secret");
  unlink(path.c_str());
  std::ofstream(path) << "x";
  chmod(path.c_str(), 0644);
  EXPECT_FALSE(OperatorTokenFile::Write(path, token).ok());
  // A private file of this user that is no token (a mistyped path naming
  // a key) is not replaced either.
  chmod(path.c_str(), 0600);
  EXPECT_FALSE(OperatorTokenFile::Write(path, token).ok());
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  unlink(path.c_str());
}

TEST(TenantRegistryTest, TokensMatchByDigestAndSubjectsByName) {
  auto registry = TenantRegistry::Create(
      Config("tenants { name: 'alice' token_sha256: '" + Sha256Hex("a-token") +
             "' tls_subject: 'CN=alice' }"
             "tenants { name: 'ops' admin: true token_sha256: '" +
             // Upper-case hex is accepted too.
             absl::AsciiStrToUpper(Sha256Hex("o-token")) + "' }"));
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->Authenticate(Token("a-token"))->name(), "alice");
  EXPECT_TRUE((*registry)->Authenticate(Token("o-token"))->admin());
  EXPECT_EQ((*registry)->Authenticate({{}, "CN=alice"})->name(), "alice");

  auto wrong = (*registry)->Authenticate(Token("a-tokeN"));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.status().message().find("a-tokeN"), std::string::npos)
      << "a token is never echoed";
  EXPECT_EQ((*registry)->Authenticate({}).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto stranger = (*registry)->Authenticate({{}, "CN=mallory"});
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(stranger.status().message().find("CN=mallory"), std::string::npos);
}

TEST(TenantRegistryTest, MalformedConfigsNameTheField) {
  auto bad_hex = TenantRegistry::Create(
      Config("tenants { name: 'a' token_sha256: 'abc' }"));
  EXPECT_EQ(bad_hex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_hex.status().message().find("tenants[0] ('a').token_sha256[0]"),
            std::string::npos)
      << bad_hex.status();
  auto twice = TenantRegistry::Create(
      Config("tenants { name: 'a' } tenants { name: 'a' }"));
  EXPECT_NE(twice.status().message().find("tenants[1].name"),
            std::string::npos);
  const std::string digest = Sha256Hex("t");
  auto shared = TenantRegistry::Create(
      Config("tenants { name: 'a' token_sha256: '" + digest +
             "' } tenants { name: 'b' token_sha256: '" + digest + "' }"));
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TenantRegistryTest, QuotasRefuseNamingLimitAndUse) {
  auto registry = TenantRegistry::Create(
      Config("tenants { name: 'a' token_sha256: '" + Sha256Hex("t") +
             "' quota { max_sessions: 1 device_memory_bytes: 100 "
             "max_queues: 2 } }"));
  ASSERT_TRUE(registry.ok());
  std::shared_ptr<Tenant> a = (*registry)->Authenticate(Token("t"))->tenant;
  ASSERT_TRUE(a->ReserveSession().ok());
  absl::Status second = a->ReserveSession();
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.message().find("max_sessions"), std::string::npos);
  EXPECT_NE(second.message().find("in use 1"), std::string::npos) << second;
  a->ReleaseSession();
  EXPECT_TRUE(a->ReserveSession().ok());

  ASSERT_TRUE(a->ReserveMemory(60).ok());
  absl::Status big = a->ReserveMemory(41);
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.message().find("device_memory_bytes"), std::string::npos);
  EXPECT_EQ(a->memory_bytes(), 60u) << "a refusal charges nothing";
  // A size that would wrap the sum past the limit is refused too.
  EXPECT_EQ(a->ReserveMemory(~uint64_t{0} - 20).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a->memory_bytes(), 60u);
  a->ReleaseMemory(60);
  EXPECT_EQ(a->memory_bytes(), 0u);

  // Staged bytes fall back to the daemon-wide default (256 MiB).
  EXPECT_EQ(a->quota().max_staged_bytes(), kDefaultMaxStagedBytes);
  a->account(0)->staged_bytes = kDefaultMaxStagedBytes - 10;
  EXPECT_TRUE(a->CheckEnqueue(10).ok());
  EXPECT_EQ(a->CheckEnqueue(11).code(), absl::StatusCode::kResourceExhausted);
  a->account(0)->staged_bytes = 0;
  // And in-flight commands to kDefaultMaxInflightCommands, summed over
  // the tenant's devices.
  EXPECT_EQ(a->quota().max_inflight_commands(), kDefaultMaxInflightCommands);
  a->account(0)->inflight_commands = kDefaultMaxInflightCommands - 2;
  a->account(1)->inflight_commands = 1;
  EXPECT_TRUE(a->CheckEnqueue(0).ok());
  a->account(1)->inflight_commands = 2;
  absl::Status full = a->CheckEnqueue(0);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("max_inflight_commands"), std::string::npos);
}

TEST(TenantRegistryTest, PriorityIsClampedToTheQuota) {
  auto registry = TenantRegistry::Create(Config(
      "tenants { name: 'a' tls_subject: 'CN=a' quota { max_priority: -1 } }"
      "tenants { name: 'b' tls_subject: 'CN=b' }"));
  ASSERT_TRUE(registry.ok());
  auto a = (*registry)->Authenticate({{}, "CN=a"})->tenant;
  EXPECT_EQ(a->ClampPriority(-5), -1);  // Lower numbers are greater.
  EXPECT_EQ(a->ClampPriority(0), 0);
  auto b = (*registry)->Authenticate({{}, "CN=b"})->tenant;
  EXPECT_EQ(b->ClampPriority(-5), -5);  // No max_priority: no limit.
}

// 0 is CUDA's least priority: set, it keeps every queue there (it used to
// read as "no limit", so a tenant could not be held to the least priority).
TEST(TenantRegistryTest, MaxPriorityZeroMeansLeastPriorityOnly) {
  auto registry = TenantRegistry::Create(Config(
      "tenants { name: 'a' tls_subject: 'CN=a' quota { max_priority: 0 } }"));
  ASSERT_TRUE(registry.ok());
  auto a = (*registry)->Authenticate({{}, "CN=a"})->tenant;
  EXPECT_EQ(a->ClampPriority(-5), 0);
  EXPECT_EQ(a->ClampPriority(-1), 0);
  EXPECT_EQ(a->ClampPriority(0), 0);
}

TEST(TenantRegistryTest, ReloadUpdatesInPlaceAndReportsRemovedTenants) {
  auto registry = TenantRegistry::Create(
      Config("tenants { name: 'a' tls_subject: 'CN=a' weight: 1 }"
             "tenants { name: 'b' tls_subject: 'CN=b' }"));
  ASSERT_TRUE(registry.ok());
  auto a = (*registry)->Authenticate({{}, "CN=a"})->tenant;
  auto account = a->account(0);
  auto removed = (*registry)->Reload(
      Config("tenants { name: 'a' tls_subject: 'CN=a2' weight: 3 }"));
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, std::vector<std::string>{"b"});
  EXPECT_EQ(account->weight.load(), 3u);
  EXPECT_EQ((*registry)->Authenticate({{}, "CN=a2"})->tenant, a);
  EXPECT_EQ((*registry)->Authenticate({{}, "CN=a"}).status().code(),
            absl::StatusCode::kUnauthenticated);
  // A bad reload keeps the old set; so does one without tenants, which
  // would turn authentication off.
  EXPECT_FALSE((*registry)->Reload(Config("tenants { name: '' }")).ok());
  auto empty = (*registry)->Reload(Config(""));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*registry)->configured());
  EXPECT_EQ((*registry)->Authenticate({{}, "nobody"}).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*registry)->Authenticate({{}, "CN=a2"})->tenant, a);
}

// allow_unchecked_kernels: per tenant, changed in place by a reload; the
// default tenant of a daemon without tenants, and the operator there, may;
// with tenants the operator may not.
TEST(TenantRegistryTest, UncheckedKernelsArePerTenantAndReloaded) {
  auto bare = TenantRegistry::Create({});
  ASSERT_TRUE(bare.ok());
  (*bare)->EnableOperatorToken("op", "/run/x.sock.operator-token");
  EXPECT_TRUE((*bare)->Authenticate({})->tenant->allow_unchecked_kernels());
  EXPECT_TRUE(
      (*bare)->Authenticate(Token("op"))->tenant->allow_unchecked_kernels());
  // Tenants configured by a reload: the operator loses it, and keeps it lost.
  for (int reload = 0; reload < 2; ++reload) {
    ASSERT_TRUE(
        (*bare)
            ->Reload(Config("tenants { name: 'c' tls_subject: 'CN=c' }"))
            .ok());
    EXPECT_FALSE(
        (*bare)->Authenticate(Token("op"))->tenant->allow_unchecked_kernels());
  }

  auto registry =
      TenantRegistry::Create(Config("tenants { name: 'a' tls_subject: 'CN=a' }"
                                    "tenants { name: 'b' tls_subject: 'CN=b' "
                                    "allow_unchecked_kernels: true }"));
  ASSERT_TRUE(registry.ok());
  (*registry)->EnableOperatorToken("op", "/run/y.sock.operator-token");
  auto a = (*registry)->Authenticate({{}, "CN=a"})->tenant;
  auto b = (*registry)->Authenticate({{}, "CN=b"})->tenant;
  EXPECT_FALSE(a->allow_unchecked_kernels());
  EXPECT_TRUE(b->allow_unchecked_kernels());
  EXPECT_FALSE((*registry)
                   ->Authenticate(Token("op"))
                   ->tenant->allow_unchecked_kernels());
  ASSERT_TRUE((*registry)
                  ->Reload(Config("tenants { name: 'a' tls_subject: 'CN=a' "
                                  "allow_unchecked_kernels: true }"
                                  "tenants { name: 'b' tls_subject: 'CN=b' }"))
                  .ok());
  EXPECT_TRUE(a->allow_unchecked_kernels());
  EXPECT_FALSE(b->allow_unchecked_kernels());
}

}  // namespace
}  // namespace gpustream::tenants
