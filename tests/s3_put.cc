// Test helper: puts files into the test S3 server through the library's own client, with the
// settings the environment gives (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, …; settings.h).
//
//   s3_put mb s3://BUCKET           creates the bucket (OK when it exists)
//   s3_put put FILE s3://B/KEY      uploads a local file as one object
//   s3_put tree DIR s3://B/PREFIX/  uploads every file under DIR as PREFIX/RELATIVE/PATH
//   s3_put start-upload s3://B/KEY  starts a multipart upload and leaves it in progress
//                                   (what a writer killed mid-upload leaves)
//   s3_put get s3://B/KEY FILE      downloads one object into a local file
//   s3_put ls s3://B/PREFIX         prints every key under PREFIX with its size, in key order
//   s3_put uploads s3://B/PREFIX    prints the key of every multipart upload in progress
// Exit 0, or 1 with the error on stderr.
#include <cstdio>
#include <string>
#include <vector>

#include "kvstore/s3/client.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/url.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

namespace {

using tfckpt::s3::Client;
using tfckpt::s3::ObjectUrl;

absl::Status PutFile(Client& client, const std::string& file, const ObjectUrl& url) {
  TFCKPT_ASSIGN_OR_RETURN(std::string bytes, tfckpt::Storage::Local().ReadSmallFile(file, 1ull << 30));
  return client.Put(url, bytes).status();
}

absl::Status GetFile(Client& client, const ObjectUrl& url, const std::string& file) {
  TFCKPT_ASSIGN_OR_RETURN(tfckpt::s3::ObjectInfo info, client.Head(url));
  std::string bytes(info.size, '\0');
  TFCKPT_RETURN_IF_ERROR(client.Read(url, 0, info.size, info.etag, bytes.data()));
  TFCKPT_ASSIGN_OR_RETURN(auto out, tfckpt::Storage::Local().Create(file));
  TFCKPT_RETURN_IF_ERROR(out->Append(bytes));
  TFCKPT_RETURN_IF_ERROR(out->Close());
  return out->Commit();
}

absl::Status PutTree(Client& client, const std::string& dir, const ObjectUrl& prefix) {
  TFCKPT_ASSIGN_OR_RETURN(std::vector<tfckpt::DirEntry> entries, tfckpt::Storage::Local().List(dir));
  for (const tfckpt::DirEntry& e : entries) {
    const ObjectUrl below{prefix.scheme, prefix.bucket, tfckpt::JoinPath(prefix.key, e.name)};
    if (e.kind == tfckpt::EntryKind::kDirectory) {
      TFCKPT_RETURN_IF_ERROR(PutTree(client, tfckpt::JoinPath(dir, e.name), {below.scheme, below.bucket, below.key + "/"}));
    } else {
      TFCKPT_RETURN_IF_ERROR(PutFile(client, tfckpt::JoinPath(dir, e.name), below));
    }
  }
  return absl::OkStatus();
}

constexpr const char* kUsage =
    "usage: s3_put mb URL | put FILE URL | tree DIR URL | start-upload URL | get URL FILE | ls URL | uploads URL";

absl::Status Main(const std::vector<std::string>& args) {
  if (args.size() < 2) return absl::InvalidArgumentError(kUsage);
  TFCKPT_ASSIGN_OR_RETURN(ObjectUrl url, tfckpt::s3::ParseObjectUrl(args[0] == "get" ? args[1] : args.back()));
  TFCKPT_ASSIGN_OR_RETURN(auto settings, tfckpt::s3::ResolveSettings(url.scheme, tfckpt::s3::ProcessEnv()));
  TFCKPT_ASSIGN_OR_RETURN(auto client, Client::Create(std::move(settings)));
  if (args[0] == "mb" && args.size() == 2) return client->CreateBucket(url);
  if (args[0] == "put" && args.size() == 3) return PutFile(*client, args[1], url);
  if (args[0] == "tree" && args.size() == 3) return PutTree(*client, args[1], url);
  if (args[0] == "start-upload" && args.size() == 2) return client->CreateMultipartUpload(url).status();
  if (args[0] == "get" && args.size() == 3) return GetFile(*client, url, args[2]);
  if (args[0] == "ls" && args.size() == 2) {
    TFCKPT_ASSIGN_OR_RETURN(auto objects, client->List(url));
    for (const auto& o : objects) std::printf("%s %llu\n", o.key.c_str(), static_cast<unsigned long long>(o.size));
    return absl::OkStatus();
  }
  if (args[0] == "uploads" && args.size() == 2) {
    TFCKPT_ASSIGN_OR_RETURN(auto uploads, client->ListMultipartUploads(url));
    for (const auto& u : uploads) std::printf("%s\n", u.key.c_str());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(kUsage);
}

}  // namespace

int main(int argc, char** argv) {
  const absl::Status s = Main(std::vector<std::string>(argv + 1, argv + argc));
  if (s.ok()) return 0;
  std::fprintf(stderr, "s3_put: %s\n", std::string(s.message()).c_str());
  return 1;
}
