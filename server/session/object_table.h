// A session's objects: one id space for queues, events, flags, buffers and
// graphs.
#ifndef GPUSTREAM_SERVER_SESSION_OBJECT_TABLE_H_
#define GPUSTREAM_SERVER_SESSION_OBJECT_TABLE_H_

#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/backend/buffer.h"
#include "server/backend/event.h"
#include "server/backend/flag.h"
#include "server/backend/queue.h"
#include "server/session/graph_recorder.h"

namespace gpustream::session {

// Ids a client mints lie in [1, 2^63); the server assigns from [2^63, 2^64).
inline constexpr uint64_t kFirstServerId = uint64_t{1} << 63;

using Object = std::variant<
    std::shared_ptr<backend::Queue>, std::shared_ptr<backend::Event>,
    std::shared_ptr<backend::Flag>, std::shared_ptr<backend::Buffer>,
    std::shared_ptr<CapturedGraph>>;

template <typename T>
constexpr const char* KindName() {
  if constexpr (std::is_same_v<T, backend::Queue>) return "queue";
  if constexpr (std::is_same_v<T, backend::Event>) return "event";
  if constexpr (std::is_same_v<T, backend::Flag>) return "flag";
  if constexpr (std::is_same_v<T, backend::Buffer>) return "buffer";
  if constexpr (std::is_same_v<T, CapturedGraph>) return "graph";
}

// Not thread-safe: the owning Session guards it with its mutex. Errors name
// the request field that carried the id.
class ObjectTable {
 public:
  // Checks a create request's `id` (0: the server picks one) and returns the
  // id to use: INVALID_ARGUMENT in the server range, ALREADY_EXISTS if used.
  absl::StatusOr<uint64_t> ReserveId(uint64_t requested,
                                     absl::string_view field) {
    if (requested == 0) {
      while (Used(next_server_id_)) ++next_server_id_;
      return next_server_id_++;
    }
    if (requested >= kFirstServerId) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " ", requested,
          " is in the server-assigned range [2^63, 2^64); client ids must be "
          "in [1, 2^63)"));
    }
    if (Used(requested)) {
      return absl::AlreadyExistsError(absl::StrCat(
          field, " ", requested, " is already used in this session"));
    }
    return requested;
  }

  void Insert(uint64_t id, Object object) {
    objects_.emplace(id, std::move(object));
  }

  // For objects made without the session's lock (their device work may
  // take seconds): Claim reserves the id as ReserveId does and holds it,
  // counted in size(), until Fill puts the object under it or Unclaim gives
  // it back. A claimed id is unknown to lookups until filled.
  absl::StatusOr<uint64_t> Claim(uint64_t requested, absl::string_view field) {
    absl::StatusOr<uint64_t> id = ReserveId(requested, field);
    if (id.ok()) claimed_.insert(*id);
    return id;
  }
  void Fill(uint64_t id, Object object) {
    claimed_.erase(id);
    Insert(id, std::move(object));
  }
  void Unclaim(uint64_t id) { claimed_.erase(id); }

  // The object, or null if `id` is unknown or not a T. No error text is
  // built: for hot paths, which call UnknownError only when it is null.
  template <typename T>
  std::shared_ptr<T> Get(uint64_t id) const {
    auto it = objects_.find(id);
    if (it == objects_.end()) return nullptr;
    auto* object = std::get_if<std::shared_ptr<T>>(&it->second);
    return object != nullptr ? *object : nullptr;
  }

  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Find(uint64_t id,
                                          absl::string_view field) const {
    std::shared_ptr<T> object = Get<T>(id);
    if (object == nullptr) return UnknownError<T>(id, field);
    return object;
  }

  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Remove(uint64_t id,
                                            absl::string_view field) {
    auto found = Find<T>(id, field);
    if (found.ok()) objects_.erase(id);
    return found;
  }

  template <typename T>
  size_t Count() const {
    size_t n = 0;
    for (const auto& [id, object] : objects_) {
      n += std::holds_alternative<std::shared_ptr<T>>(object);
    }
    return n;
  }

  // Calls `fn(T&)` for every object of kind T.
  template <typename T, typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, object] : objects_) {
      if (auto* p = std::get_if<std::shared_ptr<T>>(&object)) fn(**p);
    }
  }

  // Objects and claimed ids.
  size_t size() const { return objects_.size() + claimed_.size(); }

  // NOT_FOUND naming the request field that carried the unknown id.
  template <typename T>
  static absl::Status UnknownError(uint64_t id, absl::string_view field) {
    return absl::NotFoundError(absl::StrCat("unknown ", field, " ", id,
                                            ": no such ", KindName<T>(),
                                            " in this session"));
  }

  // Empties the table, handing every object to the caller. Claims stay:
  // their makers find the session closed and give them back.
  absl::flat_hash_map<uint64_t, Object> TakeAll() {
    return std::exchange(objects_, {});
  }

 private:
  bool Used(uint64_t id) const {
    return objects_.contains(id) || claimed_.contains(id);
  }

  absl::flat_hash_map<uint64_t, Object> objects_;
  absl::flat_hash_set<uint64_t> claimed_;
  uint64_t next_server_id_ = kFirstServerId;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_OBJECT_TABLE_H_
