// Who we are to an object store, and how that is kept current: the credentials a request
// is signed with (an AWS key pair, with a session token when temporary; or an OAuth 2
// bearer token for gs://), and the providers that hand them out. The client asks its
// provider once per request (client.cc, AddAuthHeaders), so temporary credentials are
// fetched again before they expire however long a run takes.
//
// Where they come from (the AWS SDKs' and Google's client libraries' order) is decided by
// aws_credentials.h and gcp_auth.h; this file holds what every source shares. Secrets are
// never part of a message: Describe() and every error name the source (a file, a URL, a
// variable), never a key or token.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tfckpt::s3 {

using SystemTime = std::chrono::system_clock::time_point;

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when set
  std::string bearer_token;   // gs:// OAuth 2 token: "Authorization: Bearer"
  // When temporary credentials stop working (nullopt: they do not expire).
  std::optional<SystemTime> expiration;

  bool has_keys() const { return !access_key_id.empty(); }
  bool anonymous() const { return !has_keys() && bearer_token.empty(); }
};

// Hands out the credentials to sign a request with. Every method is thread-safe.
class CredentialProvider {
 public:
  virtual ~CredentialProvider() = default;
  // The credentials to use now: cached, or fetched (again) when they are about to expire.
  // Errors name the source and never hold a secret; a source that failed is asked again
  // at a later call.
  virtual absl::StatusOr<Credentials> Get() = 0;
  // Where the credentials come from, e.g. "environment (AWS_ACCESS_KEY_ID)" or "container
  // credentials http://127.0.0.1:8080/creds": no secret.
  virtual std::string Describe() const = 0;
};

// The same credentials on every call (keys from the environment or a file; an empty
// Credentials for unsigned requests).
std::shared_ptr<CredentialProvider> FixedCredentials(Credentials credentials, std::string source);

// An error on every call: no credentials were found (`message` says where they were looked
// for), or the configuration that names them is unusable. Unauthenticated.
std::shared_ptr<CredentialProvider> NoCredentials(std::string message, std::string source);

// Fetches the credentials of a source and keeps them until they are about to expire:
// from expiration - min(15 min, lifetime / 2) on (lifetime: from the fetch to the
// expiration; the AWS SDKs' advisory window, shortened for short-lived credentials), the
// next Get() fetches again. Credentials that do not expire are fetched once. A failed
// fetch is returned to that caller; a later Get() tries again, and while the current
// credentials have not expired yet they are used instead of an error. One fetch at a time:
// concurrent callers wait for it.
class RefreshingCredentials final : public CredentialProvider {
 public:
  using Fetch = std::function<absl::StatusOr<Credentials>()>;
  using Clock = std::function<SystemTime()>;
  // REQUIRES: fetch is callable from any thread (one call at a time).
  RefreshingCredentials(Fetch fetch, std::string source, Clock clock = nullptr);

  absl::StatusOr<Credentials> Get() override;
  std::string Describe() const override { return source_; }
  // How many fetches were made (tests).
  int fetches() const;

  // When credentials fetched at `fetched` that expire at `expiration` are fetched again.
  static SystemTime RefreshTime(SystemTime fetched, SystemTime expiration);

 private:
  Fetch fetch_;
  std::string source_;
  Clock clock_;
  mutable std::mutex mu_;
  std::optional<Credentials> current_;
  SystemTime refresh_at_;
  int fetches_ = 0;
};

// "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.123Z", "2024-05-01T12:00:00+00:00" (ISO
// 8601 / RFC 3339 in UTC or with an offset, as the credential services write it), years
// 1900 to 2200. InvalidArgument otherwise.
absl::StatusOr<SystemTime> ParseIso8601(std::string_view text);

}  // namespace tfckpt::s3
