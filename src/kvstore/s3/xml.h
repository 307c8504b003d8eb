// S3's XML bodies (pugixml): error responses, ListObjectsV2, ListMultipartUploads,
// InitiateMultipartUpload and the CompleteMultipartUpload request; and STS's answers to
// AssumeRole and AssumeRoleWithWebIdentity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tfckpt::s3 {

struct S3Error {
  std::string code;     // "NoSuchKey", "SlowDown", …
  std::string message;  // the server's text
  std::string region;   // <Region>: where the bucket is (AuthorizationHeaderMalformed, redirects)
};
// The <Error> document in `body`, or nullopt when the body is not one.
std::optional<S3Error> ParseError(std::string_view body);

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  std::string etag;
};
struct ListPage {
  std::vector<ListedObject> objects;
  std::vector<std::string> common_prefixes;  // with a delimiter: the "directories", each ending in it
  bool truncated = false;
  std::string next_token;  // continuation-token of the next page
};
absl::StatusOr<ListPage> ParseListObjectsV2(std::string_view body);

struct MultipartUpload {
  std::string key, upload_id;
  std::string initiated;  // when it was created (ISO 8601), as the listing says; "" if it does not
};
struct UploadsPage {
  std::vector<MultipartUpload> uploads;
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};
absl::StatusOr<UploadsPage> ParseListMultipartUploads(std::string_view body);

// The UploadId of an InitiateMultipartUploadResult.
absl::StatusOr<std::string> ParseUploadId(std::string_view body);

// The ETag of a CopyPartResult (UploadPartCopy's answer).
absl::StatusOr<std::string> ParseCopyPartEtag(std::string_view body);

struct CompletedPart {
  int number = 0;
  std::string etag;
};
// The CompleteMultipartUpload request body. REQUIRES: parts sorted by number.
std::string CompleteMultipartUploadXml(const std::vector<CompletedPart>& parts);

// The temporary credentials of an STS answer (AssumeRoleResponse,
// AssumeRoleWithWebIdentityResponse: .../Credentials/{AccessKeyId, SecretAccessKey,
// SessionToken, Expiration}). For an <ErrorResponse>: PermissionDenied (AccessDenied and
// the other Sender errors) or Unavailable (a Receiver error), with STS's code and message;
// DataLoss for anything else. Never a credential in a message.
struct StsCredentials {
  std::string access_key_id, secret_access_key, session_token;
  std::string expiration;  // ISO 8601, as sent
};
absl::StatusOr<StsCredentials> ParseStsCredentials(std::string_view body);

}  // namespace tfckpt::s3
