// Unit tests of the credential units that need no server: the AWS config parser (botocore's
// reading of it), shell words, the AWS chain's decisions from files and the environment,
// the providers' refresh rule (a clock of the test's), the JSON and XML answers, the
// service account JWT (verified with the key's public half), retry bursts. Sources that
// talk to a service are tested against real ones (tests/credentials_oracle_test.py: moto,
// botocore as the oracle, and tests/cloud_stub.py).
#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/s3/aws_config.h"
#include "kvstore/s3/aws_credentials.h"
#include "kvstore/s3/credential_json.h"
#include "kvstore/s3/credentials.h"
#include "kvstore/s3/gcp_auth.h"
#include "kvstore/s3/http_fetch.h"
#include "kvstore/s3/retry_bursts.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/xml.h"
#include "s3_test_env.h"
#include "test_util.h"

namespace tfckpt::testing {
bool NeedsTestData() { return false; }
}  // namespace tfckpt::testing

using namespace tfckpt::s3;
using tfckpt::s3::testing::Creds;
using tfckpt::s3::testing::FakeEnv;

namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

absl::StatusOr<Settings> Resolve(const FakeEnv& env, tfckpt::ObjectStoreOptions flags = {}) {
  return ResolveSettings("s3", env.Lookup(), flags);
}

std::string Text(const IniFile& f, const std::string& section, const std::string& option) {
  for (const auto& [name, s] : f.sections) {
    if (name == section) {
      auto it = s.find(option);
      return it == s.end() ? "<absent>" : it->second.text;
    }
  }
  return "<no section>";
}

}  // namespace

TEST_CASE("AWS config files are read as botocore reads them (configparser)") {
  auto ini = ParseAwsIni(
      "# a comment\n"
      "; another\n"
      "[default]\n"
      "Region = eu-west-1\n"
      "output: json\n"
      "key = a # not a comment\n"
      "multi = first\n"
      "   second\n"
      "\n"
      "   third\n"
      "[profile dev]\r\n"
      "s3 =\r\n"
      "  endpoint_url = http://127.0.0.1:9000\r\n"
      "  # skipped\r\n"
      "  addressing_style = path\r\n"
      "x=1\r"
      "[ spaced ]\n"
      "[a]b]\n"
      "[DEFAULT]\n"
      "shared = yes\n",
      "cfg");
  REQUIRE(ini.ok());
  REQUIRE(ini->sections.size() == 4);
  CHECK(Text(*ini, "default", "region") == "eu-west-1");  // names lowercased
  CHECK(Text(*ini, "default", "output") == "json");       // ':' is a delimiter too
  CHECK(Text(*ini, "default", "key") == "a # not a comment");
  CHECK(Text(*ini, "default", "multi") == "first\nsecond\n\nthird");
  CHECK(Text(*ini, "default", "shared") == "yes");  // [DEFAULT] is in every section
  CHECK(Text(*ini, " spaced ", "shared") == "yes");  // a header is not trimmed
  CHECK(Text(*ini, "a]b", "shared") == "yes");       // up to the last ']'
  CHECK(Text(*ini, "profile dev", "x") == "1");
  const ConfigSection& dev = ini->sections[1].second;
  REQUIRE(dev.at("s3").is_nested);
  CHECK(dev.at("s3").nested.at("endpoint_url") == "http://127.0.0.1:9000");
  CHECK(dev.at("s3").nested.at("addressing_style") == "path");

  struct Bad {
    const char* text;
    const char* where;
  };
  for (const Bad& b : {Bad{"key = secret-value\n[s]\n", "f:1:"}, Bad{"[s]\nno delimiter secret-value\n", "f:2:"},
                       Bad{"[s]\n = secret-value\n", "f:2:"}, Bad{"[s]\n[s]\n", "f:2: section repeated"},
                       Bad{"[s]\na = 1\nA = secret-value\n", "f:3: option repeated"},
                       Bad{"[s]\nn =\n  no-equals-secret-value\n", "f:1: option \"n\""},
                       Bad{"[s]\na = \xff\xfe secret-value\n", "f: not UTF-8"}}) {
    CAPTURE(b.text);
    auto r = ParseAwsIni(b.text, "f");
    REQUIRE(!r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Message(r.status()).find(b.where) != std::string::npos);
    CHECK(Message(r.status()).find("secret-value") == std::string::npos);
  }
}

TEST_CASE("shell words as Python's shlex.split makes them (credential_process)") {
  using V = std::vector<std::string>;
  CHECK(*ShellSplit("a b  c") == V{"a", "b", "c"});
  CHECK(*ShellSplit("a\"b c\"d") == V{"ab cd"});
  CHECK(*ShellSplit("'x y' z") == V{"x y", "z"});
  CHECK(*ShellSplit("a\\ b") == V{"a b"});
  CHECK(*ShellSplit("\"a\\\"b\\x\"") == V{"a\"b\\x"});
  CHECK(ShellSplit("")->empty());
  CHECK(ShellSplit("  ")->empty());
  CHECK(*ShellSplit("''") == V{""});
  CHECK(*ShellSplit("a \"\" b") == V{"a", "", "b"});
  CHECK(*ShellSplit("/usr/bin/helper --profile 'my dev' \"x\\\\y\"") == V{"/usr/bin/helper", "--profile", "my dev", "x\\y"});
  for (const char* bad : {"\"abc", "'abc", "abc\\"}) CHECK(!ShellSplit(bad).ok());
}

TEST_CASE("profiles, sso-sessions and services sections; the credentials file overrides the config file") {
  auto config = ParseAwsIni(
      "[profile default]\nregion = from-profile-default\n"
      "[default]\nregion = from-default\n"  // later: replaces the whole section
      "[profile 'my dev']\nregion = r1\nservices = local\n"
      "[profile]\nregion = ignored\n"
      "[profile a b c]\nregion = ignored\n"
      "[sso-session corp]\nsso_region = eu-west-1\n"
      "[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:1\n"
      "[preview]\nx = 1\n",
      "config");
  auto creds = ParseAwsIni("[my dev]\nregion = r2\naws_access_key_id = K\n[profile other]\nx = 1\n", "credentials");
  REQUIRE(config.ok());
  REQUIRE(creds.ok());
  const AwsConfig c = CombineAwsConfig(*config, *creds);
  CHECK(Option(c.Profile("default"), "region") == "from-default");
  CHECK(Option(c.Profile("my dev"), "region") == "r2");  // the credentials file wins
  CHECK(Option(c.Profile("my dev"), "services") == "local");
  CHECK(Option(c.config_profiles.count("my dev") ? &c.config_profiles.at("my dev") : nullptr, "region") == "r1");
  CHECK(c.Profile("profile other") != nullptr);  // the credentials file's names are taken as written
  CHECK(c.Profile("a b c") == nullptr);
  CHECK(c.profiles.size() == 3);
  CHECK(c.sso_sessions.count("corp") == 1);
  CHECK(c.services.at("local").at("s3").nested.at("endpoint_url") == "http://127.0.0.1:1");
}

TEST_CASE("config file paths: variables and ~ expanded as os.path.expandvars(expanduser)") {
  FakeEnv env;
  env.vars["DIR"] = "/etc/x";
  CHECK(ExpandPath("~/a", env.Lookup()) == env.home + "/a");
  CHECK(ExpandPath("~", env.Lookup()) == env.home);
  CHECK(ExpandPath("~user/a", env.Lookup()) == "~user/a");
  CHECK(ExpandPath("$DIR/c", env.Lookup()) == "/etc/x/c");
  CHECK(ExpandPath("${DIR}c", env.Lookup()) == "/etc/xc");
  CHECK(ExpandPath("$NOPE/c$", env.Lookup()) == "$NOPE/c$");
  CHECK(ExpandPath("${unclosed", env.Lookup()) == "${unclosed");
}

TEST_CASE("ISO 8601 times as credential services write them") {
  const auto epoch = [](int64_t s) { return SystemTime(std::chrono::seconds(s)); };
  CHECK(*ParseIso8601("1970-01-01T00:00:00Z") == epoch(0));
  CHECK(*ParseIso8601("2024-05-01T12:00:00Z") == epoch(1714564800));
  CHECK(*ParseIso8601("2024-05-01T12:00:00.500Z") == epoch(1714564800) + std::chrono::milliseconds(500));
  CHECK(*ParseIso8601("2024-05-01T14:00:00+02:00") == epoch(1714564800));
  CHECK(*ParseIso8601("2024-05-01T12:00:00") == epoch(1714564800));
  // (Years past the clock's range were found by fuzz_credential_json: an overflow.)
  for (const char* bad : {"", "2024-05-01", "2024-13-01T00:00:00Z", "2024-05-01T12:00:00Zjunk", "soon", "2024-05-01T12:00Z",
                          "4070-05-01T12:00:00Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z"}) {
    CAPTURE(bad);
    CHECK(!ParseIso8601(bad).ok());
  }
}

TEST_CASE("RefreshingCredentials: fetched once, again before they expire, one fetch at a time") {
  using namespace std::chrono_literals;
  SystemTime now = SystemTime(std::chrono::hours(500000));
  int served = 0;
  std::optional<std::chrono::seconds> lifetime = std::chrono::seconds(3600);
  bool fail = false;
  RefreshingCredentials p(
      [&]() -> absl::StatusOr<Credentials> {
        if (fail) return absl::UnavailableError("service down");
        Credentials c{"KEY" + std::to_string(++served), "s", "t", "", std::nullopt};
        if (lifetime) c.expiration = now + *lifetime;
        return c;
      },
      "test source", [&] { return now; });
  CHECK(p.Get()->access_key_id == "KEY1");
  now += 44min;  // 16 min left: no refresh yet
  CHECK(p.Get()->access_key_id == "KEY1");
  now += 2min;  // 14 min left: within 15 min of the expiration
  CHECK(p.Get()->access_key_id == "KEY2");
  CHECK(p.fetches() == 2);
  // Short-lived credentials are refreshed after half their lifetime.
  lifetime = 60s;
  now += 59min;
  CHECK(p.Get()->access_key_id == "KEY3");
  now += 29s;
  CHECK(p.Get()->access_key_id == "KEY3");
  now += 2s;
  CHECK(p.Get()->access_key_id == "KEY4");
  // The source failing while the credentials still work: they are used, the source asked
  // again 10 s later; once they expire, the error.
  fail = true;
  now += 31s;
  CHECK(p.Get()->access_key_id == "KEY4");
  CHECK(p.fetches() == 5);
  now += 5s;
  CHECK(p.Get()->access_key_id == "KEY4");
  CHECK(p.fetches() == 5);
  now += 30s;
  auto down = p.Get();
  REQUIRE(!down.ok());
  CHECK(Message(down.status()) == "service down");
  fail = false;
  CHECK(p.Get()->access_key_id == "KEY5");
  // Credentials that are expired already when handed out are an error naming the source.
  lifetime = -1s;
  now += 1h;
  auto expired = p.Get();
  REQUIRE(!expired.ok());
  CHECK(Message(expired.status()).find("test source") != std::string::npos);
  // Without an expiration: fetched once.
  lifetime.reset();
  CHECK(p.Get()->access_key_id == "KEY7");
  now += 1000h;
  CHECK(p.Get()->access_key_id == "KEY7");
}

TEST_CASE("RefreshingCredentials: threads signing at once see one fetch at a time and never stale keys") {
  std::atomic<int> in_fetch{0}, overlaps{0}, served{0};
  std::atomic<int64_t> clock_ms{0};
  RefreshingCredentials p(
      [&]() -> absl::StatusOr<Credentials> {
        if (in_fetch++ != 0) ++overlaps;
        const int n = ++served;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --in_fetch;
        // Valid for 100 ms of the test's clock.
        return Credentials{"KEY" + std::to_string(n), "s", "t", "",
                           SystemTime(std::chrono::milliseconds(clock_ms.load() + 100))};
      },
      "test", [&] { return SystemTime(std::chrono::milliseconds(clock_ms.load())); });
  std::vector<std::thread> threads;
  std::atomic<int> stale{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        const int64_t asked_at = clock_ms.fetch_add(1);
        auto c = p.Get();
        if (!c.ok() || *c->expiration <= SystemTime(std::chrono::milliseconds(asked_at))) ++stale;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(overlaps == 0);
  CHECK(stale == 0);
  CHECK(served >= 20);  // refreshed about every 50 ms of the 2400
}

TEST_CASE("the JSON of credential services: fields checked, values never in messages") {
  auto meta = ParseMetadataCredentials(
      R"({"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"ASIAKEY","SecretAccessKey":"sec-value","Token":"tok","Expiration":"2030-01-01T00:00:00Z"})");
  REQUIRE(meta.ok());
  CHECK(meta->access_key_id == "ASIAKEY");
  CHECK(meta->session_token == "tok");
  CHECK(meta->expiration == *ParseIso8601("2030-01-01T00:00:00Z"));
  for (const char* bad : {R"({"AccessKeyId":"A","SecretAccessKey":"sec-value","Token":"t"})",
                          R"({"AccessKeyId":"A","SecretAccessKey":"sec-value","Token":"t","Expiration":"soon"})",
                          R"({"AccessKeyId":"A\nB","SecretAccessKey":"sec-value","Token":"t","Expiration":"2030-01-01T00:00:00Z"})",
                          R"({"AccessKeyId":7,"SecretAccessKey":"sec-value","Token":"t","Expiration":"2030-01-01T00:00:00Z"})",
                          R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no role"})", "[1]", "{", ""}) {
    CAPTURE(bad);
    auto r = ParseMetadataCredentials(bad);
    REQUIRE(!r.ok());
    CHECK(Message(r.status()).find("sec-value") == std::string::npos);
  }
  auto proc = ParseProcessCredentials(R"({"Version":1,"AccessKeyId":"AK","SecretAccessKey":"s"})");
  REQUIRE(proc.ok());
  CHECK(!proc->expiration.has_value());
  CHECK(proc->session_token.empty());
  CHECK(!ParseProcessCredentials(R"({"Version":2,"AccessKeyId":"AK","SecretAccessKey":"s"})").ok());
  CHECK(!ParseProcessCredentials(R"({"Version":1,"SecretAccessKey":"s"})").ok());
  auto sso = ParseSsoRoleCredentials(
      R"({"roleCredentials":{"accessKeyId":"AK","secretAccessKey":"s","sessionToken":"t","expiration":1714564800000}})");
  REQUIRE(sso.ok());
  CHECK(*sso->expiration == SystemTime(std::chrono::seconds(1714564800)));
  CHECK(!ParseSsoRoleCredentials(R"({"roleCredentials":{"accessKeyId":"AK","secretAccessKey":"s","sessionToken":"t"}})").ok());
  auto token = ParseSsoToken(R"({"accessToken":"at","expiresAt":"2030-01-01T00:00:00Z","region":"x"})");
  REQUIRE(token.ok());
  CHECK(token->access_token == "at");
  auto oauth = ParseOAuthToken(R"({"access_token":"ya29.x","expires_in":3599,"token_type":"Bearer"})");
  REQUIRE(oauth.ok());
  CHECK(oauth->expires_in == 3599);
  CHECK(!ParseOAuthToken(R"({"access_token":"ya29.x","expires_in":"soon"})")->expires_in.has_value());
  auto refused = ParseOAuthToken(R"({"error":"invalid_grant","error_description":"Invalid JWT Signature."})");
  REQUIRE(!refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(Message(refused.status()).find("invalid_grant") != std::string::npos);
  auto sa = ParseGoogleCredentialsFile(R"({"type":"service_account","client_email":"a@b","private_key":"pem"})");
  REQUIRE(sa.ok());
  CHECK(sa->token_uri == kGoogleTokenUri);
  auto user = ParseGoogleCredentialsFile(
      R"({"type":"authorized_user","client_id":"c","client_secret":"cs","refresh_token":"rt","token_uri":"http://127.0.0.1:1/t"})");
  REQUIRE(user.ok());
  CHECK(user->token_uri == "http://127.0.0.1:1/t");
  auto external = ParseGoogleCredentialsFile(R"({"type":"external_account"})");
  REQUIRE(!external.ok());
  CHECK(external.status().code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("STS answers: credentials, and errors with STS's code") {
  auto ok = ParseStsCredentials(
      "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleResult><Credentials>"
      "<AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>sec-value</SecretAccessKey><SessionToken>tok</SessionToken>"
      "<Expiration>2030-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>");
  REQUIRE(ok.ok());
  CHECK(ok->access_key_id == "ASIA1");
  CHECK(ok->expiration == "2030-01-01T00:00:00Z");
  auto denied = ParseStsCredentials(
      "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>not allowed</Message></Error>"
      "</ErrorResponse>");
  REQUIRE(!denied.ok());
  CHECK(denied.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(Message(denied.status()) == "STS error AccessDenied: not allowed");
  CHECK(!ParseStsCredentials("<AssumeRoleResponse><AssumeRoleResult/></AssumeRoleResponse>").ok());
  CHECK(!ParseStsCredentials("<Other/>").ok());
  CHECK(!ParseStsCredentials("<").ok());
}

TEST_CASE("AWS chain: environment first, unless --profile names a profile") {
  FakeEnv env;
  env.Write(".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = file-secret\n"
                                "[dev]\naws_access_key_id = DEVKEY\naws_secret_access_key = dev-secret\n"
                                "aws_session_token = dev-token\n");
  env.vars["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env.vars["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  env.vars["AWS_SESSION_TOKEN"] = "session";
  env.vars["AWS_SECURITY_TOKEN"] = "security";  // botocore's older name, looked at first
  CHECK(Creds(*Resolve(env)).session_token == "security");
  env.vars["AWS_PROFILE"] = "dev";  // the environment's keys still win over AWS_PROFILE
  CHECK(Creds(*Resolve(env)).access_key_id == "ENVKEY");
  tfckpt::ObjectStoreOptions flags;
  flags.profile = "dev";  // --profile: the environment's keys are not used
  auto s = Resolve(env, flags);
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "DEVKEY");
  CHECK(Creds(*s).session_token == "dev-token");
  CHECK(s->credentials->Describe().find("profile \"dev\"") != std::string::npos);
  // Half a pair in the environment is an error; a secret alone is ignored (as botocore).
  env.vars.erase("AWS_SECRET_ACCESS_KEY");
  CHECK(!Resolve(env).ok());
  env.vars.erase("AWS_ACCESS_KEY_ID");
  env.vars["AWS_SECRET_ACCESS_KEY"] = "lonely";
  CHECK(Creds(*Resolve(env)).access_key_id == "DEVKEY");
  // AWS_DEFAULT_PROFILE is looked at before AWS_PROFILE.
  env.vars["AWS_DEFAULT_PROFILE"] = "default";
  CHECK(Creds(*Resolve(env)).access_key_id == "FILEKEY");
  env.vars["AWS_DEFAULT_PROFILE"] = "nowhere";
  auto missing = Resolve(env);
  REQUIRE(!missing.ok());
  CHECK(Message(missing.status()).find("profile \"nowhere\" (AWS_DEFAULT_PROFILE)") != std::string::npos);
  flags.profile = "nowhere";
  env.vars.erase("AWS_DEFAULT_PROFILE");
  CHECK(Message(Resolve(env, flags).status()).find("(--profile)") != std::string::npos);
}

TEST_CASE("AWS chain: the credentials file before credential_process before the config file") {
  FakeEnv env;
  const std::string script =
      env.Write("helper dir/creds.sh", "printf '{\"Version\": 1, \"AccessKeyId\": \"PROCKEY\", \"SecretAccessKey\": \"p\"}'\n");
  const std::string config = env.Write(
      ".aws/config",
      "[default]\ncredential_process = sh '" + script + "'\n"
      "aws_access_key_id = CONFIGKEY\naws_secret_access_key = c\n"
      "[profile failing]\ncredential_process = sh -c 'echo broken-secret >&2; echo second-line >&2; exit 3'\n"
      "[profile silent]\ncredential_process = sh -c 'exit 4'\n"
      "[profile garbage]\ncredential_process = sh -c 'echo not-json-secret'\n"
      "[profile keys]\naws_access_key_id = CONFIGKEY\naws_secret_access_key = c\n"
      "[profile half]\naws_access_key_id = HALF\n");
  auto s = Resolve(env);
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "PROCKEY");
  env.Write(".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = f\n");
  CHECK(Creds(*Resolve(env)).access_key_id == "FILEKEY");
  tfckpt::ObjectStoreOptions flags;
  flags.profile = "keys";
  CHECK(Creds(*Resolve(env, flags)).access_key_id == "CONFIGKEY");
  flags.profile = "failing";
  auto failing = Resolve(env, flags)->credentials->Get();
  REQUIRE(!failing.ok());
  // Its standard error is never echoed (a helper may print a secret there): how much it wrote is.
  CHECK(Message(failing.status()).find("credential_process of profile \"failing\" (sh) failed with exit status 3 (its "
                                       "standard error, 2 lines, is not shown") != std::string::npos);
  CHECK(Message(failing.status()).find("broken-secret") == std::string::npos);
  CHECK(Message(failing.status()).find("second-line") == std::string::npos);
  flags.profile = "silent";
  auto silent = Resolve(env, flags)->credentials->Get();
  REQUIRE(!silent.ok());
  CHECK(Message(silent.status()).find("failed with exit status 4 and wrote nothing on its standard error") !=
        std::string::npos);
  flags.profile = "garbage";
  auto garbage = Resolve(env, flags)->credentials->Get();
  REQUIRE(!garbage.ok());
  CHECK(Message(garbage.status()).find("not JSON") != std::string::npos);
  CHECK(Message(garbage.status()).find("not-json-secret") == std::string::npos);
  flags.profile = "half";
  auto half = Resolve(env, flags);
  REQUIRE(!half.ok());
  CHECK(Message(half.status()).find(config + ": profile \"half\" has aws_access_key_id but no aws_secret_access_key") !=
        std::string::npos);
}

TEST_CASE("AWS chain: configurations that cannot work are errors naming the profile") {
  FakeEnv env;
  env.Write(".aws/config",
            "[profile both]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\ncredential_source = Environment\n"
            "[profile neither]\nrole_arn = arn:aws:iam::1:role/r\n"
            "[profile dangling]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = nowhere\n"
            "[profile loop1]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = loop2\n"
            "[profile loop2]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = loop1\n"
            "[profile empty-source]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n"
            "[profile base]\nregion = x\n"
            "[profile bad-source]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Somewhere\n"
            "[profile env-source]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Environment\n"
            "[profile mfa]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = keys\nmfa_serial = arn:mfa\n"
            "[profile keys]\naws_access_key_id = K\naws_secret_access_key = s\n"
            "[profile web]\nweb_identity_token_file = /tmp/token\n"
            "[profile sso]\nsso_account_id = 1\nsso_role_name = r\nsso_session = corp\n"
            "[profile sso-missing]\nsso_account_id = 1\nsso_role_name = r\n"
            "[profile sso-conflict]\nsso_account_id = 1\nsso_role_name = r\nsso_session = corp\nsso_region = us-west-2\n"
            "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = eu-west-1\n"
            "[profile svc]\nservices = nowhere\n");
  struct Case {
    const char* profile;
    const char* message;
  };
  for (const Case& c : {Case{"both", "has both source_profile and credential_source"},
                        Case{"neither", "neither source_profile nor credential_source"},
                        Case{"dangling", "source_profile \"nowhere\" does not exist"},
                        Case{"loop1", "(a loop)"},
                        Case{"empty-source", "source_profile \"base\" has no credentials"},
                        Case{"bad-source", "credential_source \"Somewhere\" is not Environment"},
                        Case{"env-source", "no credentials in its credential_source Environment"},
                        Case{"mfa", "MFA"},
                        Case{"web", "no role ARN"},
                        Case{"sso-missing", "lacks sso_start_url, sso_region"},
                        Case{"sso-conflict", "sso_region differs between the profile and its sso-session"},
                        Case{"svc", "names the services section \"nowhere\", which does not exist"}}) {
    CAPTURE(c.profile);
    tfckpt::ObjectStoreOptions flags;
    flags.profile = c.profile;
    auto s = Resolve(env, flags);
    REQUIRE(!s.ok());
    CHECK(Message(s.status()).find(c.message) != std::string::npos);
  }
  // An SSO profile whose token was never cached: the error says to log in.
  tfckpt::ObjectStoreOptions flags;
  flags.profile = "sso";
  auto sso = Resolve(env, flags);
  REQUIRE(sso.ok());
  auto token = sso->credentials->Get();
  REQUIRE(!token.ok());
  CHECK(Message(token.status()).find("run aws sso login --sso-session corp") != std::string::npos);
  // A cached token that expired: likewise, without asking the portal (SHA-1 of "corp").
  env.vars["AWS_ENDPOINT_URL_SSO"] = "http://127.0.0.1:1";  // (were it asked: loopback, refused)
  const std::string cache = env.Write(".aws/sso/cache/ee0bfd2552fbd840c02cc48b6e823320543c450f.json",
                                      R"({"accessToken":"at","expiresAt":"2020-01-01T00:00:00Z"})");
  auto expired = Resolve(env, flags)->credentials->Get();
  REQUIRE(!expired.ok());
  CHECK(Message(expired.status()).find("the cached SSO token (" + cache + ") has expired: run aws sso login --sso-session corp") !=
        std::string::npos);
}

TEST_CASE("AWS chain: container credentials only to the hosts the SDKs allow") {
  FakeEnv env;
  for (const char* ok : {"http://127.0.0.1:8080/creds", "http://127.1.2.3/x", "http://[::1]:9/x", "http://localhost/x",
                         "http://169.254.170.23/v1/credentials", "https://creds.example.com/x"}) {
    CAPTURE(ok);
    env.vars["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = ok;
    auto s = Resolve(env);
    REQUIRE(s.ok());
    CHECK(s->credentials->Describe() == std::string("container credentials ") + ok);
  }
  for (const char* bad : {"http://10.0.0.1/creds", "http://example.com/x", "ftp://127.0.0.1/x", "http:///x"}) {
    CAPTURE(bad);
    env.vars["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = bad;
    auto s = Resolve(env);
    REQUIRE(!s.ok());
    CHECK(Message(s.status()).find("AWS_CONTAINER_CREDENTIALS_FULL_URI") != std::string::npos);
  }
  // The relative URI (ECS) wins and goes to 169.254.170.2.
  env.vars["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/abc";
  CHECK(Resolve(env)->credentials->Describe() == "container credentials http://169.254.170.2/v2/credentials/abc");
}

TEST_CASE("AWS endpoints and regions: flags, then variables, then the profile's services section and endpoint_url") {
  FakeEnv env;
  env.Write(".aws/config",
            "[default]\nregion = eu-north-1\nservices = local\nendpoint_url = http://127.0.0.1:3\n"
            "[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:2\nsts =\n  endpoint_url = http://127.0.0.1:4\n");
  env.vars["AWS_NO_SIGN_REQUEST"] = "true";
  auto s = Resolve(env);
  REQUIRE(s.ok());
  CHECK(s->endpoint == "http://127.0.0.1:2");
  CHECK(s->region == "eu-north-1");
  env.vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:5";
  env.vars["AWS_DEFAULT_REGION"] = "us-west-1";
  CHECK(Resolve(env)->endpoint == "http://127.0.0.1:5");
  CHECK(Resolve(env)->region == "us-west-1");
  env.vars["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:6";
  env.vars["AWS_REGION"] = "ap-east-1";
  CHECK(Resolve(env)->endpoint == "http://127.0.0.1:6");
  CHECK(Resolve(env)->region == "ap-east-1");
  tfckpt::ObjectStoreOptions flags;
  flags.endpoint_url = "http://127.0.0.1:7/";
  flags.region = "sa-east-1";
  CHECK(Resolve(env, flags)->endpoint == "http://127.0.0.1:7");
  CHECK(Resolve(env, flags)->region == "sa-east-1");
  flags.endpoint_url = "http://127.0.0.1:7/base";
  auto bad = Resolve(env, flags);
  REQUIRE(!bad.ok());
  CHECK(Message(bad.status()).find("--endpoint-url") != std::string::npos);
  // User information in an endpoint is never kept (requests do not send it) nor shown.
  flags.endpoint_url = "http://user:pass-secret@127.0.0.1:7/";
  CHECK(Resolve(env, flags)->endpoint == "http://127.0.0.1:7");
  CHECK(Resolve(env, flags)->DebugString().find("pass-secret") == std::string::npos);
  flags.endpoint_url = "http://user:pass-secret@127.0.0.1:7/base";
  bad = Resolve(env, flags);
  REQUIRE(!bad.ok());
  CHECK(Message(bad.status()).find("\"http://127.0.0.1:7/base\" has a path") != std::string::npos);
  CHECK(Message(bad.status()).find("pass-secret") == std::string::npos);
  CHECK(Message(bad.status()).find("user") == std::string::npos);
  CHECK(RedactedUrl("https://u:p@[::1]:9/x") == "https://[::1]:9/x");
  CHECK(RedactedUrl("http://u:p/w#?@host:9") == "http://host:9");  // unencoded '/', '#', '?' in a password
  CHECK(RedactedUrl("http://host:9/") == "http://host:9/");
  CHECK(RedactedUrl("u:p@host") == "host");
  CHECK(Message(SplitHttpUrl("ftp://u:pass-secret@host/").status()).find("pass-secret") == std::string::npos);
  env.vars.erase("AWS_ENDPOINT_URL_S3");
  env.vars.erase("AWS_ENDPOINT_URL");
  env.vars["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "True";
  CHECK(Resolve(env)->endpoint == "https://s3.ap-east-1.amazonaws.com");
  CHECK(!Resolve(env)->path_style);
  // STS has its own entry in the services section.
  env.vars.erase("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
  AwsContext ctx;
  ctx.env = env.Lookup();
  ctx.config = *LoadAwsConfig(ctx.env);
  CHECK(ConfiguredEndpoint(ctx, "sts")->url == "http://127.0.0.1:4");
  CHECK(ConfiguredEndpoint(ctx, "sso")->url == "http://127.0.0.1:3");  // the profile's endpoint_url
}

namespace {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::string Base64UrlDecode(std::string s) {
  for (char& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (s.size() % 4 != 0) s.push_back('=');
  std::string out(s.size(), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  REQUIRE(n >= 0);
  out.resize(static_cast<size_t>(n) - (s.size() - s.find_last_not_of('=') - 1));
  return out;
}

}  // namespace

TEST_CASE("service account JWT: RS256 over header.claims, verified with the key's public half") {
  std::unique_ptr<EVP_PKEY, KeyFree> key(EVP_RSA_gen(2048));
  REQUIRE(key);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  REQUIRE(PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1);
  char* pem = nullptr;
  const long pem_len = BIO_get_mem_data(bio.get(), &pem);
  GoogleCredentialsFile account;
  account.type = "service_account";
  account.client_email = "ckpt@project.iam.gserviceaccount.com";
  account.private_key = std::string(pem, static_cast<size_t>(pem_len));
  account.private_key_id = "kid-1";
  account.token_uri = "http://127.0.0.1:1/token";
  const SystemTime now = SystemTime(std::chrono::seconds(1714564800));
  auto jwt = ServiceAccountAssertion(account, kStorageScope, now);
  REQUIRE(jwt.ok());
  const size_t dot1 = jwt->find('.'), dot2 = jwt->rfind('.');
  REQUIRE(dot1 != dot2);
  const auto header = nlohmann::json::parse(Base64UrlDecode(jwt->substr(0, dot1)));
  const auto claims = nlohmann::json::parse(Base64UrlDecode(jwt->substr(dot1 + 1, dot2 - dot1 - 1)));
  CHECK(header == nlohmann::json({{"alg", "RS256"}, {"typ", "JWT"}, {"kid", "kid-1"}}));
  CHECK(claims["iss"] == account.client_email);
  CHECK(claims["aud"] == account.token_uri);
  CHECK(claims["scope"] == std::string(kStorageScope));
  CHECK(claims["iat"] == 1714564800);
  CHECK(claims["exp"] == 1714564800 + 3600);
  const std::string signature = Base64UrlDecode(jwt->substr(dot2 + 1));
  const std::string signed_part = jwt->substr(0, dot2);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  REQUIRE(EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) == 1);
  CHECK(EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                         reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size()) == 1);
  CHECK(jwt->find('=') == std::string::npos);
  CHECK(Base64Url("\xfb\xff") == "-_8");

  account.private_key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  auto bad = ServiceAccountAssertion(account, kStorageScope, now);
  REQUIRE(!bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("gs chain: keys, tokens, credentials files, then the metadata server") {
  FakeEnv env;
  auto describe = [&] {
    auto s = ResolveSettings("gs", env.Lookup());
    REQUIRE(s.ok());
    return s->credentials->Describe();
  };
  CHECK(describe() == "GCE metadata server metadata.google.internal");
  const std::string adc = env.Write(
      ".config/gcloud/application_default_credentials.json",
      R"({"type":"authorized_user","client_id":"c","client_secret":"cs","refresh_token":"rt"})");
  CHECK(describe() == "user credentials " + adc);
  env.vars["CLOUDSDK_CONFIG"] = env.home + "/elsewhere";
  CHECK(describe() == "GCE metadata server metadata.google.internal");
  const std::string sa = env.Write("sa.json", R"({"type":"service_account","client_email":"a@b","private_key":"x"})");
  env.vars["GOOGLE_APPLICATION_CREDENTIALS"] = sa;
  auto bad_key = ResolveSettings("gs", env.Lookup());
  REQUIRE(!bad_key.ok());
  CHECK(Message(bad_key.status()) == sa + ": \"private_key\" is not a private key in PEM");
  env.vars["GOOGLE_APPLICATION_CREDENTIALS"] = env.home + "/missing.json";
  CHECK(Message(ResolveSettings("gs", env.Lookup()).status()).find("GOOGLE_APPLICATION_CREDENTIALS") != std::string::npos);
  env.vars["GOOGLE_APPLICATION_CREDENTIALS"] = env.Write("ext.json", R"({"type":"external_account"})");
  CHECK(ResolveSettings("gs", env.Lookup()).status().code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("retry bursts: overlapping retries of several requests are one burst") {
  std::vector<std::string> lines;
  RetryBursts bursts([&](const RetryNotice& n) { lines.push_back(n.Line()); });
  const RetryNotice notice{absl::UnavailableError("GET s3://b/k: HTTP 503 SlowDown"), 10};
  {
    RetryBursts::Request a(&bursts), b(&bursts);
    a.Retrying(notice);
    a.Retrying(notice);  // the same request again: the same burst
    b.Retrying(notice);  // another while a is still retrying: the same burst
  }
  {
    RetryBursts::Request c(&bursts);  // no failure: no burst
  }
  {
    RetryBursts::Request d(&bursts);
    d.Retrying({absl::UnavailableError("PUT s3://b/k: HTTP 500"), 1});
  }
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "GET s3://b/k: HTTP 503 SlowDown; retrying (up to 10 times)");
  CHECK(lines[1] == "PUT s3://b/k: HTTP 500; retrying (up to 1 time)");
  CHECK(bursts.bursts() == 2);
}
