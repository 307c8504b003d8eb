// Unit tests of the object store client's parts that need no server: URLs, settings
// resolution, SigV4 against AWS's published examples, range planning, XML bodies.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "kvstore/s3/multipart_writer.h"
#include "kvstore/s3/part_plan.h"
#include "kvstore/s3/client.h"
#include "kvstore/s3/ranges.h"
#include "kvstore/s3/s3_storage.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/sigv4.h"
#include "kvstore/s3/url.h"
#include "kvstore/s3/xml.h"
#include "tfckpt/open.h"
#include "tfckpt/run.h"
#include "tfckpt/storage.h"
#include "s3_test_env.h"
#include "test_util.h"

namespace tfckpt::testing {
bool NeedsTestData() { return false; }
}  // namespace tfckpt::testing

using namespace tfckpt::s3;
using tfckpt::s3::testing::Creds;
using tfckpt::s3::testing::FakeEnv;

TEST_CASE("object URLs: scheme, bucket and key") {
  auto u = ParseObjectUrl("s3://my-bucket/models/run1/model.ckpt-100");
  REQUIRE(u.ok());
  CHECK(u->scheme == "s3");
  CHECK(u->bucket == "my-bucket");
  CHECK(u->key == "models/run1/model.ckpt-100");
  CHECK(u->ToString() == "s3://my-bucket/models/run1/model.ckpt-100");

  auto g = ParseObjectUrl("gs://tpu_runs.eu/dir/");
  REQUIRE(g.ok());
  CHECK(g->scheme == "gs");
  CHECK(g->bucket == "tpu_runs.eu");
  CHECK(g->key == "dir/");

  auto bare = ParseObjectUrl("s3://abc");
  REQUIRE(bare.ok());
  CHECK(bare->key.empty());
  CHECK(IsObjectUrl("gs://x"));
  CHECK(!IsObjectUrl("/tmp/s3://x"));
}

TEST_CASE("malformed object URLs are InvalidArgument naming the URL") {
  for (const char* bad : {"s3://", "s3:///key", "s3://ab/k", "s3://My-Bucket/k", "s3://-bucket/k", "s3://bucket-/k",
                          "s3://buck*et/k", "http://bucket/k", "s3:/bucket/k", "S3://bucket/k"}) {
    CAPTURE(bad);
    auto u = ParseObjectUrl(bad);
    REQUIRE(!u.ok());
    CHECK(u.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(u.status().message()).find(bad) != std::string::npos);
  }
  CHECK(!ParseObjectUrl("s3://bucket/" + std::string(1025, 'k')).ok());
  CHECK(ParseObjectUrl("s3://bucket/" + std::string(1024, 'k')).ok());
  CHECK(!ParseObjectUrl(std::string("s3://bucket/a\0b", 15)).ok());
}

namespace {

void CheckNoSecret(const std::string& text, const std::string& secret) {
  CAPTURE(text);
  CHECK(text.find(secret) == std::string::npos);
}

}  // namespace

TEST_CASE("s3 settings: environment keys, region and endpoint") {
  FakeEnv env;
  env.vars["AWS_ACCESS_KEY_ID"] = "AKIDENVIRONMENT1234";
  env.vars["AWS_SECRET_ACCESS_KEY"] = "env-secret-value";
  env.vars["AWS_SESSION_TOKEN"] = "env-session-token";
  env.vars["AWS_DEFAULT_REGION"] = "eu-west-1";
  env.Write(".aws/credentials", "[default]\naws_access_key_id = FROMFILE\naws_secret_access_key = file-secret\n");
  auto s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "AKIDENVIRONMENT1234");
  CHECK(Creds(*s).secret_access_key == "env-secret-value");
  CHECK(Creds(*s).session_token == "env-session-token");
  CHECK(s->region == "eu-west-1");
  CHECK(s->endpoint == "https://s3.eu-west-1.amazonaws.com");
  CHECK(!s->path_style);
  const std::string debug = s->DebugString();
  CheckNoSecret(debug, "env-secret-value");
  CheckNoSecret(debug, "env-session-token");
  CheckNoSecret(debug, "AKIDENVIRONMENT1234");
  CHECK(debug.find("environment (AWS_ACCESS_KEY_ID)") != std::string::npos);

  env.vars["AWS_REGION"] = "ap-south-1";  // wins over AWS_DEFAULT_REGION
  env.vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000/";
  env.vars["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:8080/";  // wins over AWS_ENDPOINT_URL
  s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  CHECK(s->region == "ap-south-1");
  CHECK(s->endpoint == "http://127.0.0.1:8080");
  CHECK(s->path_style);

  env.vars.erase("AWS_SECRET_ACCESS_KEY");
  auto half = ResolveSettings("s3", env.Lookup());
  REQUIRE(!half.ok());
  CHECK(half.status().code() == absl::StatusCode::kInvalidArgument);
  CheckNoSecret(std::string(half.status().message()), "AKIDENVIRONMENT1234");

  env.vars["AWS_SECRET_ACCESS_KEY"] = "x";
  for (const char* bad : {"ftp://host", "127.0.0.1:9000", "http://", "http:///x", "http://host:9000/base"}) {
    CAPTURE(bad);
    env.vars["AWS_ENDPOINT_URL_S3"] = bad;
    auto s3 = ResolveSettings("s3", env.Lookup());
    REQUIRE(!s3.ok());
    CHECK(std::string(s3.status().message()).find(std::string("\"") + bad + "\"") != std::string::npos);
  }
  env.vars["AWS_ENDPOINT_URL_S3"] = "https://host:9000//";
  CHECK(ResolveSettings("s3", env.Lookup())->endpoint == "https://host:9000");
}

TEST_CASE("s3 settings: profiles in the shared credentials and config files") {
  FakeEnv env;
  env.Write(".aws/credentials",
            "# comment\n[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = default-secret\n\n"
            "[work]\naws_access_key_id = WORKKEY0042\naws_secret_access_key = work-secret\n"
            "aws_session_token = work-token\n");
  env.Write(".aws/config",
            "[default]\nregion = us-west-2\n[profile work]\nregion = eu-central-1\n"
            "endpoint_url = https://minio.example:9000\n");
  auto s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "DEFAULTKEY");
  CHECK(Creds(*s).secret_access_key == "default-secret");
  CHECK(s->region == "us-west-2");
  CHECK(s->credentials->Describe().find(".aws/credentials") != std::string::npos);

  env.vars["AWS_PROFILE"] = "work";
  s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "WORKKEY0042");
  CHECK(Creds(*s).session_token == "work-token");
  CHECK(s->region == "eu-central-1");
  CHECK(s->endpoint == "https://minio.example:9000");
  CHECK(s->path_style);
  CheckNoSecret(s->DebugString(), "work-secret");
  CheckNoSecret(s->DebugString(), "work-token");

  // Files named by the variables instead of ~/.aws.
  env.Write("elsewhere/creds", "[work]\naws_access_key_id = OTHERKEY\naws_secret_access_key = other\n");
  env.vars["AWS_SHARED_CREDENTIALS_FILE"] = env.home + "/elsewhere/creds";
  env.vars["AWS_CONFIG_FILE"] = env.home + "/elsewhere/none";
  s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "OTHERKEY");
  CHECK(s->region == "us-east-1");
  CHECK(s->endpoint == "https://s3.us-east-1.amazonaws.com");

  env.vars["AWS_PROFILE"] = "missing";
  auto missing = ResolveSettings("s3", env.Lookup());
  REQUIRE(!missing.ok());
  CHECK(std::string(missing.status().message()).find("missing") != std::string::npos);

  // A malformed file is named with its line, never with a value in it.
  env.Write("elsewhere/creds", "[work]\naws_secret_access_key broken-secret\n");
  env.vars["AWS_PROFILE"] = "work";
  auto broken = ResolveSettings("s3", env.Lookup());
  REQUIRE(!broken.ok());
  CHECK(std::string(broken.status().message()).find("creds:2") != std::string::npos);
  CheckNoSecret(std::string(broken.status().message()), "broken-secret");
}

TEST_CASE("s3 settings: no credentials at all is an error saying where they were looked for") {
  FakeEnv env;
  auto s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  auto none = s->credentials->Get();
  REQUIRE(!none.ok());
  CHECK(none.status().code() == absl::StatusCode::kUnauthenticated);
  const std::string m(none.status().message());
  CAPTURE(m);
  CHECK(m.find("no AWS credentials found") != std::string::npos);
  for (const char* place : {"AWS_ACCESS_KEY_ID", ".aws/credentials", ".aws/config", "AWS_WEB_IDENTITY_TOKEN_FILE",
                            "AWS_CONTAINER_CREDENTIALS", "instance metadata", "--no-sign-request"}) {
    CHECK(m.find(place) != std::string::npos);
  }
  // Unsigned only when asked: AWS_NO_SIGN_REQUEST or --no-sign-request.
  env.vars["AWS_NO_SIGN_REQUEST"] = "true";
  s = ResolveSettings("s3", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).anonymous());
  CHECK(s->DebugString().find("AWS_NO_SIGN_REQUEST") != std::string::npos);
  env.vars["AWS_NO_SIGN_REQUEST"] = "maybe";
  auto bad = ResolveSettings("s3", env.Lookup());
  REQUIRE(!bad.ok());
  CHECK(std::string(bad.status().message()).find("AWS_NO_SIGN_REQUEST=maybe") != std::string::npos);
  env.vars.erase("AWS_NO_SIGN_REQUEST");
  tfckpt::ObjectStoreOptions flags;
  flags.no_sign_request = true;
  s = ResolveSettings("s3", env.Lookup(), flags);
  REQUIRE(s.ok());
  CHECK(Creds(*s).anonymous());
  CHECK(s->DebugString().find("--no-sign-request") != std::string::npos);
  auto gs = ResolveSettings("gs", env.Lookup(), flags);
  REQUIRE(gs.ok());
  CHECK(Creds(*gs).anonymous());
  CHECK(!ResolveSettings("ftp", env.Lookup()).ok());
}

TEST_CASE("gs settings: HMAC keys, then a token, then a token file, then the metadata server") {
  FakeEnv env;
  auto s = ResolveSettings("gs", env.Lookup());
  REQUIRE(s.ok());
  CHECK(s->endpoint == "https://storage.googleapis.com");
  CHECK(s->region == "auto");
  CHECK(s->credentials->Describe() == "GCE metadata server metadata.google.internal");
  env.vars["GCE_METADATA_HOST"] = "127.0.0.1:1";
  CHECK(ResolveSettings("gs", env.Lookup())->credentials->Describe() == "GCE metadata server 127.0.0.1:1");

  env.Write("token", "ya29.file-token\n");
  env.vars["CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"] = env.home + "/token";
  s = ResolveSettings("gs", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).bearer_token == "ya29.file-token");
  CHECK(s->credentials->Describe().find("token file") != std::string::npos);
  CheckNoSecret(s->DebugString(), "ya29");

  env.vars["GOOGLE_OAUTH_ACCESS_TOKEN"] = "ya29.env-token";
  CHECK(Creds(*ResolveSettings("gs", env.Lookup())).bearer_token == "ya29.env-token");
  // A token goes into a header: a line break in it would add a header of its own.
  env.vars["GOOGLE_OAUTH_ACCESS_TOKEN"] = "ya29.x\r\nX-Injected: 1";
  auto injected = ResolveSettings("gs", env.Lookup());
  REQUIRE(!injected.ok());
  CheckNoSecret(std::string(injected.status().message()), "ya29");
  env.Write("bad-token", "ya29.a\nb\n");
  env.vars["GOOGLE_OAUTH_ACCESS_TOKEN"] = "";
  env.vars["CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"] = env.home + "/bad-token";
  CHECK(!ResolveSettings("gs", env.Lookup()).ok());
  env.vars["CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"] = env.home + "/token";
  env.vars["GOOGLE_OAUTH_ACCESS_TOKEN"] = "ya29.env-token";

  env.vars["GS_ACCESS_KEY_ID"] = "GOOGHMACKEY";
  env.vars["GS_SECRET_ACCESS_KEY"] = "hmac-secret";
  env.vars["TFCKPT_GS_ENDPOINT_URL"] = "http://127.0.0.1:8080";
  s = ResolveSettings("gs", env.Lookup());
  REQUIRE(s.ok());
  CHECK(Creds(*s).access_key_id == "GOOGHMACKEY");
  CHECK(Creds(*s).bearer_token.empty());
  CHECK(s->endpoint == "http://127.0.0.1:8080");
  CheckNoSecret(s->DebugString(), "hmac-secret");

  env.vars.erase("GS_ACCESS_KEY_ID");
  env.vars.erase("GOOGLE_OAUTH_ACCESS_TOKEN");
  env.vars["CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"] = env.home + "/no-such-file";
  CHECK(!ResolveSettings("gs", env.Lookup()).ok());  // half a key pair
  env.vars.erase("GS_SECRET_ACCESS_KEY");
  CHECK(!ResolveSettings("gs", env.Lookup()).ok());  // unreadable token file
}

// AWS's SigV4 test suite (aws-sig-v4-test-suite): AKIDEXAMPLE, 2015-08-30T12:36:00Z,
// us-east-1, service "service"; expected signatures as published.
TEST_CASE("SigV4: aws-sig-v4-test-suite GET cases") {
  const SigningKeyParts key{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service"};
  auto sign = [&](std::vector<QueryParam> query) {
    SigningRequest r{"GET",
                     "/",
                     std::move(query),
                     {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                     std::string(kEmptySha256)};
    return AuthorizationHeader(r, key);
  };
  const std::string prefix =
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
      "SignedHeaders=host;x-amz-date, Signature=";
  CHECK(sign({}) == prefix + "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");  // get-vanilla
  CHECK(sign({{"Param1", "value1"}}) == prefix + "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
  // Sorted by name: sent Param2 first.
  CHECK(sign({{"Param2", "value2"}, {"Param1", "value1"}}) ==
        prefix + "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
  // get-vanilla-query-order-key: same name, sorted by value ("Value1" < "value2").
  CHECK(sign({{"Param1", "value2"}, {"Param1", "Value1"}}) ==
        prefix + "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1");

  std::string signed_headers;
  SigningRequest r{"GET",
                   "/",
                   {{"Param1", "value2"}, {"Param1", "Value1"}},
                   {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                   std::string(kEmptySha256)};
  CHECK(CanonicalRequest(r, &signed_headers) ==
        "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(signed_headers == "host;x-amz-date");
}

// The worked examples of Amazon S3's "Signature calculations for the Authorization
// header" page: examplebucket, AKIAIOSFODNN7EXAMPLE, 2013-05-24T00:00:00Z, us-east-1.
TEST_CASE("SigV4: Amazon S3's documented examples") {
  const SigningKeyParts key{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", "s3"};
  const std::string host = "examplebucket.s3.amazonaws.com";
  const std::string date = "20130524T000000Z";
  auto signature = [](const std::string& auth) { return auth.substr(auth.find("Signature=") + 10); };

  // GET Object, first 10 bytes.
  SigningRequest get{"GET",
                     "/test.txt",
                     {},
                     {{"Host", host},
                      {"Range", "bytes=0-9"},
                      {"x-amz-content-sha256", std::string(kEmptySha256)},
                      {"x-amz-date", date}},
                     std::string(kEmptySha256)};
  CHECK(signature(AuthorizationHeader(get, key)) == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  std::string signed_headers;
  CanonicalRequest(get, &signed_headers);
  CHECK(signed_headers == "host;range;x-amz-content-sha256;x-amz-date");

  // PUT Object: a key with '$' (encoded %24) and a payload hash.
  const std::string body = "Welcome to Amazon S3.";
  CHECK(Sha256Hex(body) == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigningRequest put{"PUT",
                     "/test$file.text",
                     {},
                     {{"Host", host},
                      {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                      {"x-amz-content-sha256", Sha256Hex(body)},
                      {"x-amz-date", date},
                      {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                     Sha256Hex(body)};
  CHECK(signature(AuthorizationHeader(put, key)) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");

  // GET Bucket lifecycle: a valueless parameter is signed as "lifecycle=".
  SigningRequest lifecycle{"GET",
                           "/",
                           {{"lifecycle", ""}},
                           {{"Host", host}, {"x-amz-content-sha256", std::string(kEmptySha256)}, {"x-amz-date", date}},
                           std::string(kEmptySha256)};
  CHECK(signature(AuthorizationHeader(lifecycle, key)) ==
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");

  // List objects: parameters given out of order are sorted.
  SigningRequest list{"GET",
                      "/",
                      {{"prefix", "J"}, {"max-keys", "2"}},
                      {{"Host", host}, {"x-amz-content-sha256", std::string(kEmptySha256)}, {"x-amz-date", date}},
                      std::string(kEmptySha256)};
  CHECK(signature(AuthorizationHeader(list, key)) ==
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("SigV4 helpers: encoding, canonical query, date") {
  CHECK(UriEncode("a b/c~d_e.f-g*h", false) == "a%20b/c~d_e.f-g%2Ah");
  CHECK(UriEncode("a/b=c&d", true) == "a%2Fb%3Dc%26d");
  CHECK(UriEncode("\xE1\x88\xB4", true) == "%E1%88%B4");
  CHECK(CanonicalQueryString({{"uploads", ""}, {"prefix", "a b/c"}}) == "prefix=a%20b%2Fc&uploads=");
  CHECK(CanonicalQueryString({{"list-type", "2"}, {"continuation-token", "x+y="}, {"prefix", ""}}) ==
        "continuation-token=x%2By%3D&list-type=2&prefix=");
  CHECK(AmzDate(std::chrono::system_clock::from_time_t(1440938160)) == "20150830T123600Z");
  CHECK(Sha256Hex("") == kEmptySha256);
}

TEST_CASE("range planning: sorted, neighbours merged, split into request-sized pieces") {
  using V = std::vector<ByteRange>;
  CHECK(PlanRangeRequests({}, 0, 10).empty());
  CHECK(PlanRangeRequests({{5, 0}}, 0, 10).empty());
  // Out of order, touching and overlapping ranges become one.
  CHECK(PlanRangeRequests({{20, 5}, {0, 10}, {10, 4}, {12, 6}}, 0, 100) == V{{0, 18}, {20, 5}});
  // A gap up to max_gap is read through.
  CHECK(PlanRangeRequests({{20, 5}, {0, 10}, {10, 4}, {12, 6}}, 2, 100) == V{{0, 25}});
  CHECK(PlanRangeRequests({{0, 10}, {13, 1}}, 2, 100) == V{{0, 10}, {13, 1}});
  // A range inside another.
  CHECK(PlanRangeRequests({{0, 100}, {10, 5}}, 0, 1000) == V{{0, 100}});
  // Split into pieces of at most piece_size.
  CHECK(PlanRangeRequests({{0, 25}}, 0, 10) == V{{0, 10}, {10, 10}, {20, 5}});
  CHECK(PlanRangeRequests({{0, 10}, {100, 20}}, 0, 10) == V{{0, 10}, {100, 10}, {110, 10}});
}

TEST_CASE("multipart part size: at least 8 MiB and at most 10000 parts") {
  constexpr uint64_t MiB = 1ull << 20;
  CHECK(MultipartPartSize(0) == 8 * MiB);
  CHECK(MultipartPartSize(1) == 8 * MiB);
  CHECK(MultipartPartSize(80000 * MiB) == 8 * MiB);
  CHECK(MultipartPartSize(80000 * MiB + 1) == 9 * MiB);
  const uint64_t huge = 5ull << 40;  // 5 TiB, S3's largest object
  const uint64_t part = MultipartPartSize(huge);
  CHECK((huge + part - 1) / part <= 10000);
  CHECK(part % MiB == 0);
}

TEST_CASE("XML: errors, listings, uploads") {
  auto err = ParseError(
      "<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not "
      "exist.</Message><Key>k</Key></Error>");
  REQUIRE(err.has_value());
  CHECK(err->code == "NoSuchKey");
  CHECK(err->message == "The specified key does not exist.");
  CHECK(!ParseError("").has_value());
  CHECK(!ParseError("<ListBucketResult/>").has_value());

  auto page = ParseListObjectsV2(
      "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>tok==</NextContinuationToken>"
      "<Contents><Key>p/a</Key><Size>10</Size><ETag>&quot;e1&quot;</ETag></Contents>"
      "<Contents><Key>p/b &amp; c</Key><Size>6000000000</Size><ETag>\"e2-2\"</ETag></Contents></ListBucketResult>");
  REQUIRE(page.ok());
  REQUIRE(page->objects.size() == 2);
  CHECK(page->objects[0].key == "p/a");
  CHECK(page->objects[0].etag == "\"e1\"");
  CHECK(page->objects[1].key == "p/b & c");
  CHECK(page->objects[1].size == 6000000000ull);
  CHECK(page->truncated);
  CHECK(page->next_token == "tok==");
  CHECK(!ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").ok());
  CHECK(!ParseListObjectsV2("<Error/>").ok());
  CHECK(!ParseListObjectsV2("not xml <").ok());

  auto uploads = ParseListMultipartUploads(
      "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
      "<Upload><Key>m.data</Key><UploadId>id-1</UploadId></Upload>"
      "<Upload><Key>m.index</Key><UploadId>id-2</UploadId></Upload></ListMultipartUploadsResult>");
  REQUIRE(uploads.ok());
  REQUIRE(uploads->uploads.size() == 2);
  CHECK(uploads->uploads[1].key == "m.index");
  CHECK(uploads->uploads[1].upload_id == "id-2");
  CHECK(!uploads->truncated);

  auto id = ParseUploadId(
      "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>abc</UploadId>"
      "</InitiateMultipartUploadResult>");
  REQUIRE(id.ok());
  CHECK(*id == "abc");
  CHECK(!ParseUploadId("<InitiateMultipartUploadResult/>").ok());

  CHECK(CompleteMultipartUploadXml({{1, "\"a\""}, {2, "\"b\""}}) ==
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;a&quot;</ETag></Part>"
        "<Part><PartNumber>2</PartNumber><ETag>&quot;b&quot;</ETag></Part></CompleteMultipartUpload>");
}

TEST_CASE("retry delays: exponential caps, capped at max_delay, full jitter below the cap") {
  RetryPolicy p;  // TensorFlow's defaults
  CHECK(p.max_retries == 10);
  CHECK(p.initial_delay == std::chrono::milliseconds(100));
  CHECK(p.max_delay == std::chrono::seconds(32));
  auto sample = [&](int attempt, std::chrono::microseconds* lo, std::chrono::microseconds* hi) {
    *lo = std::chrono::microseconds::max();
    *hi = std::chrono::microseconds(0);
    for (int i = 0; i < 2000; ++i) {
      const auto d = RetryDelay(p, attempt);
      *lo = std::min(*lo, d);
      *hi = std::max(*hi, d);
    }
  };
  std::chrono::microseconds lo, hi;
  sample(0, &lo, &hi);
  CHECK(hi <= std::chrono::milliseconds(100));
  CHECK(hi > std::chrono::milliseconds(50));
  CHECK(lo < std::chrono::milliseconds(10));  // full jitter reaches down to 0
  sample(3, &lo, &hi);
  CHECK(hi <= std::chrono::milliseconds(800));
  CHECK(hi > std::chrono::milliseconds(400));
  CHECK(lo < std::chrono::milliseconds(80));
  sample(60, &lo, &hi);  // far past the cap: no overflow, capped at 32 s
  CHECK(hi <= std::chrono::seconds(32));
  CHECK(hi > std::chrono::seconds(16));
  p.initial_delay = std::chrono::microseconds(0);
  CHECK(RetryDelay(p, 5) == std::chrono::microseconds(0));
}

TEST_CASE("PartLayout: parts of the first size, then doubling every 2000 parts, without gaps") {
  constexpr uint64_t kMiB = 1ull << 20;
  const tfckpt::s3::PartLayout layout(8 * kMiB);
  CHECK(layout.Begin(0) == 0);
  CHECK(layout.End(0) == 8 * kMiB);
  CHECK(layout.PartOf(8 * kMiB - 1) == 0);
  CHECK(layout.PartOf(8 * kMiB) == 1);
  CHECK(layout.Begin(2000) == 2000 * 8 * kMiB);
  CHECK(layout.End(2000) - layout.Begin(2000) == 16 * kMiB);
  CHECK(layout.PartOf(2000 * 8 * kMiB + 16 * kMiB) == 2001);
  // 10,000 parts (S3's limit) hold 496 GiB: 8, 16, 32, 64 and 128 MiB parts, 2000 each.
  CHECK(layout.Begin(10000) == 2000 * (8 + 16 + 32 + 64 + 128) * kMiB);
  for (int k : {0, 1, 1999, 2000, 2001, 3999, 4000, 9999}) {
    CHECK(layout.PartOf(layout.Begin(k)) == k);
    CHECK(layout.PartOf(layout.End(k) - 1) == k);
  }
}


namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The rules every plan keeps: parts tile [0, size) in order; all but the last at least
// 5 MiB; copied parts at most max_copy_part and copying what the copies say.
void CheckPlan(const std::vector<PlannedPart>& parts, uint64_t size, const std::vector<CopyRun>& copies,
               const PartLimits& limits = {}) {
  REQUIRE(!parts.empty());
  CHECK(parts.front().begin == 0);
  CHECK(parts.back().end == size);
  CHECK(parts.size() <= static_cast<size_t>(limits.max_parts));
  for (size_t i = 0; i < parts.size(); ++i) {
    const PlannedPart& p = parts[i];
    INFO("part ", i, " [", p.begin, ", ", p.end, ")");
    CHECK(p.begin < p.end);
    if (i > 0) CHECK(p.begin == parts[i - 1].end);
    if (i + 1 < parts.size()) CHECK(p.end - p.begin >= kMinPart);
    if (!p.copied()) continue;
    CHECK(p.end - p.begin <= limits.max_copy_part);
    // Inside one of the copies, copying its bytes.
    const auto c = std::find_if(copies.begin(), copies.end(), [&](const CopyRun& r) {
      return r.source == p.source && r.offset <= p.begin && p.end <= r.offset + r.size;
    });
    REQUIRE(c != copies.end());
    CHECK(p.source_offset == c->source_offset + (p.begin - c->offset));
  }
}

uint64_t CopiedBytes(const std::vector<PlannedPart>& parts) {
  uint64_t n = 0;
  for (const PlannedPart& p : parts) n += p.copied() ? p.end - p.begin : 0;
  return n;
}

}  // namespace

TEST_CASE("PlanParts: one copy of the whole object is copied parts only") {
  const std::vector<CopyRun> copies = {{0, 100 * kMiB, 0, 7}};
  auto parts = PlanParts(100 * kMiB, copies);
  REQUIRE(parts.ok());
  CheckPlan(*parts, 100 * kMiB, copies);
  CHECK(parts->size() == 1);
  CHECK(CopiedBytes(*parts) == 100 * kMiB);
}

TEST_CASE("PlanParts: copies that continue each other in one source are one copy") {
  std::vector<CopyRun> copies;
  for (uint64_t i = 0; i < 64; ++i) copies.push_back({i * kMiB, kMiB, 0, 1000 + i * kMiB});  // CopyRegion's 1 MiB steps
  auto parts = PlanParts(64 * kMiB, copies);
  REQUIRE(parts.ok());
  REQUIRE(parts->size() == 1);
  CHECK(parts->front().copied());
  CHECK(parts->front().source_offset == 1000);
}

TEST_CASE("PlanParts: copies under 5 MiB are sent; nothing copied means no plan") {
  auto parts = PlanParts(20 * kMiB, {{0, 4 * kMiB, 0, 0}, {10 * kMiB, 5 * kMiB - 1, 1, 0}});
  REQUIRE(parts.ok());
  CHECK(parts->empty());
  auto none = PlanParts(0, {});
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("PlanParts: a small gap at the start takes the copy's first bytes with it") {
  const std::vector<CopyRun> copies = {{100, 50 * kMiB, 0, 0}};
  auto parts = PlanParts(100 + 50 * kMiB, copies);
  REQUIRE(parts.ok());
  CheckPlan(*parts, 100 + 50 * kMiB, copies);
  REQUIRE(parts->size() == 2);
  CHECK(!(*parts)[0].copied());
  CHECK((*parts)[0].end == 5 * kMiB);
  CHECK(CopiedBytes(*parts) == 100 + 50 * kMiB - 5 * kMiB);
}

TEST_CASE("PlanParts: small gaps between copies and at the end") {
  // header | copy A 20 MiB | 3 bytes | copy B 30 MiB | 1 MiB gap | copy C 6 MiB (too short to give 5 MiB
  // and keep 5 MiB: sent whole) | 10 bytes at the end.
  const uint64_t a = 64, b = a + 20 * kMiB + 3, c = b + 30 * kMiB + kMiB, end = c + 6 * kMiB + 10;
  const std::vector<CopyRun> copies = {{a, 20 * kMiB, 0, 0}, {b, 30 * kMiB, 1, 0}, {c, 6 * kMiB, 0, 40 * kMiB}};
  auto parts = PlanParts(end, copies);
  REQUIRE(parts.ok());
  CheckPlan(*parts, end, copies);
  // A's and B's starts gave 5 MiB to the small gaps before them; C is sent with the tail.
  CHECK(CopiedBytes(*parts) == (20 * kMiB - (5 * kMiB - 64)) + (30 * kMiB - (5 * kMiB - 3)));
  CHECK(!parts->back().copied());
  CHECK(parts->back().end - parts->back().begin == kMiB + 6 * kMiB + 10);
}

TEST_CASE("PlanParts: a gap of 5 MiB or more stands alone, in parts of 8 to 16 MiB") {
  const std::vector<CopyRun> copies = {{40 * kMiB, 10 * kMiB, 0, 0}};
  auto parts = PlanParts(50 * kMiB, copies);
  REQUIRE(parts.ok());
  CheckPlan(*parts, 50 * kMiB, copies);
  CHECK(CopiedBytes(*parts) == 10 * kMiB);
  for (const PlannedPart& p : *parts) {
    if (!p.copied()) CHECK(p.end - p.begin >= 8 * kMiB);
    if (!p.copied()) CHECK(p.end - p.begin < 16 * kMiB);
  }
}

TEST_CASE("PlanParts: a copy over 5 GiB is split into copied parts of at most 5 GiB (a layout only)") {
  const uint64_t size = 12 * (1ull << 30) + 17;
  const std::vector<CopyRun> copies = {{0, size, 0, 3}};
  auto parts = PlanParts(size, copies);
  REQUIRE(parts.ok());
  CheckPlan(*parts, size, copies);
  CHECK(parts->size() == 3);
  CHECK(CopiedBytes(*parts) == size);
  PartLimits small;
  small.max_copy_part = 64 * kMiB;
  auto more = PlanParts(size, copies, small);
  REQUIRE(more.ok());
  CheckPlan(*more, size, copies, small);
  CHECK(more->size() == (size + 64 * kMiB - 1) / (64 * kMiB));
}

TEST_CASE("PlanParts: more than 10,000 parts is refused (the object is then sent whole)") {
  // 6 MiB copies from alternating sources with 5 MiB gaps: two parts each.
  std::vector<CopyRun> copies;
  uint64_t at = 0;
  for (int i = 0; i < 5001; ++i) {
    at += 5 * kMiB;
    copies.push_back({at, 6 * kMiB, i % 2, 0});
    at += 6 * kMiB;
  }
  auto parts = PlanParts(at, copies);
  CHECK(absl::IsFailedPrecondition(parts.status()));
  copies.resize(4999);
  auto fits = PlanParts(copies.back().offset + 6 * kMiB, copies);
  REQUIRE(fits.ok());
  CheckPlan(*fits, copies.back().offset + 6 * kMiB, copies);
  CHECK(fits->size() == 9998);
}

TEST_CASE("PlanParts: copies past the end or overlapping are a bug") {
  CHECK(absl::IsInvalidArgument(PlanParts(10 * kMiB, {{5 * kMiB, 6 * kMiB, 0, 0}}).status()));
  CHECK(absl::IsInvalidArgument(PlanParts(30 * kMiB, {{0, 10 * kMiB, 0, 0}, {5 * kMiB, 10 * kMiB, 1, 0}}).status()));
}


// Last in this file: irreversible for the process (nothing above uses the object store Storage).
TEST_CASE("FileLayout: small pieces in groups of at most a window, large ones fetched as read") {
  constexpr uint64_t kMiB = 1 << 20;
  // TF's order: a small bias before each large kernel; three small tensors after the last.
  const std::vector<std::pair<uint64_t, uint64_t>> pieces = {
      {0, 4000}, {4000, 20 * kMiB}, {4000 + 20 * kMiB, 4000}, {8000 + 20 * kMiB, 20 * kMiB},
      {8000 + 40 * kMiB, 6 * kMiB}, {8000 + 46 * kMiB, 3 * kMiB}, {8000 + 49 * kMiB, 3 * kMiB},
      {8000 + 52 * kMiB, 0}};
  FileLayout l(pieces, 16 * kMiB);
  // A bias: itself alone (a kernel follows), never the kernel's bytes.
  auto f = l.For(10, 100);
  REQUIRE(f.has_value());
  CHECK((f->window && f->offset == 0 && f->size == 4000));
  f = l.For(4000 + 20 * kMiB, 4000);
  REQUIRE(f.has_value());
  CHECK((f->window && f->offset == 4000 + 20 * kMiB && f->size == 4000));
  // Within a kernel: what is asked, and where the kernel ends.
  f = l.For(4000 + kMiB, kMiB);
  REQUIRE(f.has_value());
  CHECK((!f->window && f->offset == 4000 + kMiB && f->size == kMiB && f->piece_end == 4000 + 20 * kMiB));
  // 6 MiB is large; the two 3 MiB pieces after it form one group.
  f = l.For(8000 + 40 * kMiB, 6 * kMiB);
  REQUIRE(f.has_value());
  CHECK(!f->window);
  f = l.For(8000 + 50 * kMiB, 10);
  REQUIRE(f.has_value());
  CHECK((f->window && f->offset == 8000 + 46 * kMiB && f->size == 6 * kMiB));
  // A read across pieces, or outside any: no plan (the caller reads exactly that).
  CHECK(!l.For(0, 8000).has_value());
  CHECK(!l.For(8000 + 60 * kMiB, 1).has_value());
  // Groups stop at the window: 10 pieces of 3 MiB in groups of 5 (15 MiB).
  std::vector<std::pair<uint64_t, uint64_t>> small;
  for (uint64_t i = 0; i < 10; ++i) small.push_back({i * 3 * kMiB, 3 * kMiB});
  FileLayout g(small, 16 * kMiB);
  CHECK(g.For(14 * kMiB, 1)->offset == 0);
  CHECK(g.For(14 * kMiB, 1)->size == 15 * kMiB);
  CHECK(g.For(16 * kMiB, 1)->offset == 15 * kMiB);
  // Overlapping pieces (damaged files) are read as one; untrusted ends do not overflow.
  FileLayout o({{0, 100}, {50, 100}, {UINT64_MAX - 10, 100}}, 16 * kMiB);
  CHECK(o.For(120, 10)->size == 150);
  CHECK(o.For(UINT64_MAX - 5, 3).has_value());
}

TEST_CASE("a run given refusing stores: every object URL is an error at once, without a request") {
  tfckpt::RunContext hermetic(
      {.stores = {{"s3", tfckpt::NewRefusingStorage()}, {"gs", tfckpt::NewRefusingStorage()}}});
  {
    tfckpt::RunContext::Scope scope(hermetic);
    auto f = tfckpt::Storage::For("s3://examplebucket/run/ckpt-10.index").OpenForRead("s3://examplebucket/run/ckpt-10.index");
    REQUIRE(!f.ok());
    CHECK(f.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(f.status().message()) ==
          "s3://examplebucket/run/ckpt-10.index: this run refuses the store of this scheme");
    CHECK(!tfckpt::Location::Of("gs://bucket/key").Exists());
    CHECK(tfckpt::OpenCheckpoint("s3://examplebucket/run/ckpt-10").status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
}
