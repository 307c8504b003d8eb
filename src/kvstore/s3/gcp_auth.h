// Google Cloud Storage credentials (gs://, Cloud Storage's XML API), in this order (the
// first that applies wins; one that applies but is unusable is an error):
//
//   1. GS_ACCESS_KEY_ID + GS_SECRET_ACCESS_KEY: HMAC keys, requests signed as SigV4;
//   2. GOOGLE_OAUTH_ACCESS_TOKEN: an OAuth 2 access token;
//   3. CLOUDSDK_AUTH_ACCESS_TOKEN_FILE: a file holding one (`gcloud auth
//      print-access-token > FILE`);
//   4. GOOGLE_APPLICATION_CREDENTIALS: a credentials file, as Application Default
//      Credentials read it: a service account key ("type": "service_account": a JWT
//      signed RS256 with its private key, exchanged at its token_uri for an access token)
//      or a user's refresh token ("type": "authorized_user", what `gcloud auth
//      application-default login` writes: exchanged at its token_uri);
//   5. gcloud's application_default_credentials.json in $CLOUDSDK_CONFIG (default
//      ~/.config/gcloud), the same two types;
//   6. the GCE / GKE metadata server (GCE_METADATA_HOST, default
//      metadata.google.internal): the instance's service account token.
//
// Access tokens from 4-6 are fetched on the first request and again before they expire
// (RefreshingCredentials). When 6 does not answer either, requests fail with "no Google
// Cloud credentials found" and the places looked at. Anonymous requests (public buckets)
// only with --no-sign-request (settings.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kvstore/s3/credential_json.h"
#include "kvstore/s3/credentials.h"
#include "kvstore/s3/env.h"

namespace tfckpt::s3 {

// The scope requested for service accounts: objects read and written.
inline constexpr std::string_view kStorageScope = "https://www.googleapis.com/auth/devstorage.read_write";

// The chain above. InvalidArgument naming the variable or file for a half key pair, an
// unreadable or malformed credentials file, a private key that is not an RSA key in PEM,
// a token with a control character; never a secret.
absl::StatusOr<std::shared_ptr<CredentialProvider>> ResolveGoogleCredentials(const EnvLookup& env);

// base64url without padding (RFC 4648 §5), as JWTs are written.
std::string Base64Url(std::string_view bytes);

// The JWT a service account signs to ask its token_uri for an access token: header
// {"alg":"RS256","typ":"JWT","kid":private_key_id}, claims {"iss": client_email,
// "scope": `scope`, "aud": token_uri, "iat": now, "exp": now + 1 h}, signed with
// RSASSA-PKCS1-v1_5 SHA-256. InvalidArgument when private_key is not an RSA key in PEM.
absl::StatusOr<std::string> ServiceAccountAssertion(const GoogleCredentialsFile& account, std::string_view scope,
                                                    SystemTime now);

}  // namespace tfckpt::s3
