// AWS credentials the way the AWS SDKs find them (botocore's default chain, in order; the
// first source that applies wins, and one that applies but fails is an error, not a
// reason to try the next):
//
//   1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SECURITY_TOKEN or
//      AWS_SESSION_TOKEN, AWS_CREDENTIAL_EXPIRATION); skipped when the profile was named
//      on the command line (--profile), as the AWS CLI does;
//   2. the profile's role_arn (without web_identity_token_file): STS AssumeRole signed
//      with the credentials of its source_profile (itself resolved by 3-7, or by another
//      role_arn: chains) or of its credential_source (Environment, Ec2InstanceMetadata,
//      EcsContainer); role_session_name, external_id, duration_seconds; mfa_serial is an
//      error (no prompt);
//   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME;
//      each variable, even empty, wins over the profile's web_identity_token_file,
//      role_arn, role_session_name) → STS AssumeRoleWithWebIdentity, unsigned, the token
//      file read again at every refresh (EKS IRSA rotates it);
//   4. SSO: the profile's sso_account_id/sso_role_name with sso_session (an
//      [sso-session NAME] section: sso_start_url, sso_region) or the legacy
//      sso_start_url/sso_region; the token `aws sso login` cached in
//      ~/.aws/sso/cache/SHA1(session name or start URL).json → the portal's
//      GetRoleCredentials (an expired token is an error: run `aws sso login`);
//   5. the credentials file's section of the profile: aws_access_key_id,
//      aws_secret_access_key, aws_security_token or aws_session_token;
//   6. the profile's credential_process: its JSON output (Version 1), run again before
//      an Expiration it gives;
//   7. the config file's profile: aws_access_key_id, aws_secret_access_key, …;
//   8. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on
//      http://169.254.170.2) or AWS_CONTAINER_CREDENTIALS_FULL_URI (https, or http to a
//      loopback address, 169.254.170.2, 169.254.170.23 (EKS Pod Identity), fd00:ec2::23 or
//      localhost), with the Authorization header from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
//      (read at every fetch) or AWS_CONTAINER_AUTHORIZATION_TOKEN; 3 tries;
//   9. EC2 instance metadata (unless AWS_EC2_METADATA_DISABLED=true): IMDSv2 (a PUT for
//      the session token, then the role and its credentials with it; IMDSv1 when the
//      token is refused, unless AWS_EC2_METADATA_V1_DISABLED), at
//      AWS_EC2_METADATA_SERVICE_ENDPOINT / ec2_metadata_service_endpoint or
//      http://169.254.169.254 (http://[fd00:ec2::254] in ipv6 mode), timeout
//      AWS_METADATA_SERVICE_TIMEOUT (1 s), AWS_METADATA_SERVICE_NUM_ATTEMPTS (1).
//
// When none applies, the provider's Get() fails with "no AWS credentials found" and every
// place looked at. Sources that need the network (2-4, 6, 8, 9) are asked on the first
// Get(), not here: resolving reads files and the environment only. Temporary credentials
// come from a RefreshingCredentials (credentials.h) and are fetched again before they
// expire.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kvstore/s3/aws_config.h"
#include "kvstore/s3/credentials.h"
#include "kvstore/s3/env.h"

namespace tfckpt::s3 {

struct AwsContext {
  EnvLookup env;
  AwsConfig config;
  std::string profile = "default";  // the profile in use
  bool profile_from_flag = false;   // named by --profile: the environment's keys are not used
  std::string region;               // as configured ("" when nothing says)
  std::string ca_bundle;            // settings.h: the CA bundle for https ("" for the system's)
};

// An endpoint URL configured for `service` ("s3", "sts", "sso"), and where it was found;
// empty when none (the service's own endpoint applies). In botocore's order:
// AWS_ENDPOINT_URL_<SERVICE>, AWS_ENDPOINT_URL, the profile's services section
// ("services = NAME", then [services NAME] SERVICE = endpoint_url = …), the profile's
// endpoint_url; none of them with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true or the
// profile's ignore_configured_endpoint_urls = true. InvalidArgument when the profile
// names a services section that does not exist.
struct ConfiguredUrl {
  std::string url;
  std::string from;  // "AWS_ENDPOINT_URL_S3", "services section \"x\" in PATH", …
};
absl::StatusOr<ConfiguredUrl> ConfiguredEndpoint(const AwsContext& ctx, std::string_view service);

// The credential chain above for ctx.profile. InvalidArgument for a configuration that
// cannot work (half a key pair, a source_profile that does not exist, a loop of roles,
// both source_profile and credential_source, an SSO profile missing a setting, an
// AWS_CONTAINER_CREDENTIALS_FULL_URI to a host that is not allowed, …), naming the file,
// profile or variable and never a value that is a secret.
absl::StatusOr<std::shared_ptr<CredentialProvider>> ResolveAwsCredentials(const AwsContext& ctx);

// True for "true" in any case (botocore's ensure_boolean of a string).
bool AwsTrue(std::string_view value);

}  // namespace tfckpt::s3
