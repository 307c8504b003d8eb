// Where an object store is and who we are to it, resolved from the conventions users
// already have: the AWS CLI's flags, variables and files, Google's Application Default
// Credentials, the metadata servers of EC2, ECS/EKS and GCE. Secrets are held by the
// credential provider (credentials.h) and never printed: DebugString() and every error
// leave them out.
//
// Resolution for s3:// (the first that applies wins, per setting):
//   credentials  none with --no-sign-request or AWS_NO_SIGN_REQUEST=true (unsigned
//                requests, for public buckets); else the AWS SDKs' chain
//                (aws_credentials.h: environment, role_arn, web identity, SSO, the
//                credentials file, credential_process, the config file, container
//                credentials, EC2 instance metadata) for the profile --profile, else
//                AWS_DEFAULT_PROFILE, else AWS_PROFILE, else "default". A profile that
//                is named but exists in neither file is an error; when no source has
//                credentials, requests fail with an error listing where they were
//                looked for (never unsigned without asking)
//   region       --region, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else
//                us-east-1
//   endpoint     --endpoint-url, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
//                services section (s3 = endpoint_url = …), the profile's endpoint_url
//                (none of the configured ones with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS),
//                else https://s3.REGION.amazonaws.com
//   CA bundle    AWS_CA_BUNDLE, the profile's ca_bundle, REQUESTS_CA_BUNDLE (botocore's
//                order), else the system's certificates: the certificate authorities an
//                https:// endpoint (and STS, the SSO portal) is checked against
//   addressing   path-style (http://HOST/BUCKET/KEY) for a custom endpoint or a bucket
//                name with a dot; virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com/KEY)
//                for AWS itself
// Resolution for gs:// (Cloud Storage's XML API):
//   credentials  none with --no-sign-request; else gcp_auth.h's chain (HMAC keys,
//                GOOGLE_OAUTH_ACCESS_TOKEN, CLOUDSDK_AUTH_ACCESS_TOKEN_FILE,
//                GOOGLE_APPLICATION_CREDENTIALS, gcloud's application default
//                credentials, the GCE metadata server)
//   region       "auto" (what Cloud Storage expects in SigV4 scopes)
//   endpoint     TFCKPT_GS_ENDPOINT_URL, else https://storage.googleapis.com; path-style
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kvstore/s3/credentials.h"
#include "kvstore/s3/env.h"
#include "tfckpt/run.h"
#include "tfckpt/storage.h"

namespace tfckpt::s3 {

struct Settings {
  std::string scheme;    // "s3" or "gs"
  std::string endpoint;  // "https://s3.us-east-1.amazonaws.com", no trailing slash
  std::string region;
  bool path_style = true;
  // The endpoint is AWS's own for `region` (nothing configured one): a bucket found in
  // another region (a redirect, client.h) is then asked at that region's endpoint.
  bool endpoint_follows_region = false;
  // A PEM file of the certificate authorities to trust ("" for the system's), and what named it.
  std::string ca_bundle, ca_bundle_from;
  // Never null; hands out empty (anonymous) credentials for unsigned requests.
  std::shared_ptr<CredentialProvider> credentials;

  // One line with every setting and where the credentials come from; never a secret.
  std::string DebugString() const;
};

// Resolves the settings for `scheme` ("s3" or "gs") in the order above; `flags` are the
// command line's (storage.h). Reads the environment and the config files only: sources
// that need the network are asked by the provider on the first request.
// InvalidArgument for a half-set key pair, an unreadable or malformed config or
// credentials file (naming the file and line, never a value), a named profile that does
// not exist, an unusable credential configuration, a bad AWS_NO_SIGN_REQUEST, or an
// endpoint that is not http(s)://HOST[:PORT], or a CA bundle that is not a readable file.
absl::StatusOr<Settings> ResolveSettings(std::string_view scheme, const EnvLookup& env,
                                         const ObjectStoreOptions& flags = {});

}  // namespace tfckpt::s3
