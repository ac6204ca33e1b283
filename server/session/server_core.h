// Everything the daemon serves, independent of the transport: discovery,
// sessions and the dispatch of session operations.
#ifndef GPUSTREAM_SERVER_SESSION_SERVER_CORE_H_
#define GPUSTREAM_SERVER_SESSION_SERVER_CORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "proto/gpustream/v1/server_config.pb.h"
#include "server/backend/device.h"
#include "server/modules/module_registry.h"
#include "server/session/session.h"
#include "server/session/session_manager.h"
#include "server/share/share_tickets.h"
#include "server/tenants/tenant_registry.h"
#include "server/util/timer_thread.h"
#include "server/version.h"

namespace gpustream::session {

using tenants::Principal;

inline constexpr uint32_t kMinProtocolVersion = 1;
inline constexpr uint32_t kMaxProtocolVersion = 1;

// Thread-safe. Owns the devices and their module registries.
class ServerCore {
 public:
  // Loads each device's modules (built-ins plus `module_folders`).
  // `tenants`: the configured tenants; null means none (every caller is
  // the tenant "default").
  static absl::StatusOr<std::unique_ptr<ServerCore>> Create(
      std::vector<std::unique_ptr<backend::Device>> devices,
      const std::vector<std::string>& module_folders, ManagerOptions options,
      std::unique_ptr<tenants::TenantRegistry> tenants = nullptr);

  // The tenant behind a request's credentials; UNAUTHENTICATED if none.
  absl::StatusOr<Principal> Authenticate(
      const tenants::Credentials& credentials) const {
    return tenants_->Authenticate(credentials);
  }
  // SIGHUP: new tenants, weights and quotas; sessions of removed tenants
  // end with ABORTED. The old set stays (and the error is returned) if
  // `config` is invalid.
  absl::Status ReloadTenants(const v1::ServerConfig& config);

  absl::Status GetVersion(const v1::GetVersionRequest& req,
                          v1::GetVersionResponse* resp);
  absl::Status GetServerInfo(const v1::GetServerInfoRequest& req,
                             v1::GetServerInfoResponse* resp);
  absl::Status ListDevices(const v1::ListDevicesRequest& req,
                           v1::ListDevicesResponse* resp);
  absl::Status ListModules(const v1::ListModulesRequest& req,
                           v1::ListModulesResponse* resp);
  absl::Status OpenSession(const Principal& who,
                           const v1::OpenSessionRequest& req,
                           v1::OpenSessionResponse* resp);
  void CloseSession(const Principal& who, const v1::CloseSessionRequest& req,
                    v1::CloseSessionResponse* resp, Session::Done done);
  absl::Status KeepAlive(const Principal& who, const v1::KeepAliveRequest& req,
                         v1::KeepAliveResponse* resp);
  // The Admin service: PERMISSION_DENIED unless `who` is an admin. Every
  // action is logged with the acting tenant.
  absl::Status ListSessions(const Principal& who,
                            const v1::ListSessionsRequest& req,
                            v1::ListSessionsResponse* resp);
  absl::Status KillSession(const Principal& who,
                           const v1::KillSessionRequest& req,
                           v1::KillSessionResponse* resp);
  absl::Status GetStats(const Principal& who, const v1::GetStatsRequest& req,
                        v1::GetStatsResponse* resp);
  // What GetStats answers, with no caller check and no log line: for the
  // metrics endpoint. Thread-safe.
  void Stats(v1::GetStatsResponse* resp) const;

  // The caller's session named by a request (another tenant's is NOT_FOUND);
  // UNAVAILABLE once shutting down.
  absl::StatusOr<std::shared_ptr<Session>> FindSession(
      const Principal& who, const std::string& session_id);

  // Stops device failure reports reaching a core being destroyed.
  ~ServerCore();

  // Called (once per failure, on a backend thread) when a device failed
  // and Recover could not bring it back: a reset does not clear an error
  // the driver calls process-fatal, so only a new process can use the
  // device again. gpustreamd stops and exits kExitDeviceLost; without a
  // handler the device stays failed (new sessions on it get ABORTED).
  // Set before serving.
  using DeviceLostHandler =
      std::function<void(uint32_t device_id, const absl::Status& why)>;
  void SetDeviceLostHandler(DeviceLostHandler handler) {
    on_device_lost_ = std::move(handler);
  }

  // From now on every request fails with UNAVAILABLE.
  void BeginShutdown() { shutting_down_.store(true); }
  bool shutting_down() const { return shutting_down_.load(); }

  SessionManager& sessions() { return *sessions_; }
  // HOST_SHARED buffers' tickets, redeemed on the share socket (the
  // transport sets its path before serving).
  share::ShareTickets& share_tickets() { return share_tickets_; }
  // See TenantRegistry::EnableOperatorToken.
  void EnableOperatorToken(const std::string& token, const std::string& path) {
    tenants_->EnableOperatorToken(token, path);
  }
  // Module files each device's registry refused, and why.
  std::vector<absl::Status> RefusedModules() const;

 private:
  ServerCore() = default;

  // A device's fatal error: abort its sessions (ABORTED naming the cause),
  // then reset the device so that new sessions work. With `context` (a
  // tenant's own context failed): abort only the sessions on it.
  void OnDeviceFailure(uint32_t device_id, const backend::Device* context,
                       const backend::DeviceFailure& failure);
  // Every configured tenant (or "default") with its weight, by name, as SM
  // partitions are sized. The local operator gets none: under
  // SM_PARTITIONS it administers, but opens no session.
  TenantWeights Weights() const;
  // PERMISSION_DENIED unless `who` is an admin, logged (admin_denied).
  absl::Status RequireAdmin(const Principal& who,
                            absl::string_view action) const;

  std::unique_ptr<tenants::TenantRegistry> tenants_;
  std::vector<std::unique_ptr<backend::Device>> devices_;
  std::vector<std::unique_ptr<modules::ModuleRegistry>> registries_;
  // After the devices and registries they use, before the sessions placed
  // by them.
  std::vector<std::unique_ptr<DeviceSharing>> sharing_;
  v1::GpuSharing sharing_mode_ = v1::GPU_SHARING_SHARED_CONTEXT;
  util::TimerThread timer_;
  share::ShareTickets share_tickets_;  // Before sessions_, which use it.
  std::atomic<bool> shutting_down_{false};
  // Before sessions_: a device-failure chore the session manager's
  // housekeeper runs while it is destroyed may still call it.
  DeviceLostHandler on_device_lost_;
  std::unique_ptr<SessionManager> sessions_;  // Destroyed first.
};

// Runs a session operation with the uniform asynchronous signature, whether
// the Session method is synchronous (returns a status) or takes `done`.
// `cancel` (may be null) ends a waiting operation when its caller goes away.
template <typename Req, typename Resp>
void Invoke(Session& session, absl::Status (Session::*op)(const Req&, Resp*),
            const Req& req, Resp* resp, Session::Done done,
            const Session::Cancel& = nullptr) {
  done((session.*op)(req, resp));
}

template <typename Req, typename Resp>
void Invoke(Session& session,
            void (Session::*op)(const Req&, Resp*, Session::Done,
                                const Session::Cancel&),
            const Req& req, Resp* resp, Session::Done done,
            const Session::Cancel& cancel = nullptr) {
  (session.*op)(req, resp, std::move(done), cancel);
}

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_SERVER_CORE_H_
