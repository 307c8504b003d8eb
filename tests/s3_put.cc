// Test helper: puts files into the test S3 server through the library's own client, with the
// settings the environment gives (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, …; settings.h).
//
//   s3_put mb s3://BUCKET           creates the bucket (OK when it exists)
//   s3_put put FILE s3://B/KEY      uploads a local file as one object
//   s3_put tree DIR s3://B/PREFIX/  uploads every file under DIR as PREFIX/RELATIVE/PATH
//   s3_put start-upload s3://B/KEY  starts a multipart upload and leaves it in progress
//                                   (what a writer killed mid-upload leaves)
// Exit 0, or 1 with the error on stderr.
#include <cstdio>
#include <string>
#include <vector>

#include "kvstore/s3/client.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/url.h"
#include "tfckpt/path.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

namespace {

using tfckpt::s3::Client;
using tfckpt::s3::ObjectUrl;

absl::Status PutFile(Client& client, const std::string& file, const ObjectUrl& url) {
  TFCKPT_ASSIGN_OR_RETURN(std::string bytes, tfckpt::Storage::Local().ReadSmallFile(file, 1ull << 30));
  return client.Put(url, bytes).status();
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

absl::Status Main(const std::vector<std::string>& args) {
  if (args.size() < 2) return absl::InvalidArgumentError("usage: s3_put mb URL | put FILE URL | tree DIR URL | start-upload URL");
  TFCKPT_ASSIGN_OR_RETURN(ObjectUrl url, tfckpt::s3::ParseObjectUrl(args.back()));
  TFCKPT_ASSIGN_OR_RETURN(auto settings, tfckpt::s3::ResolveSettings(url.scheme, tfckpt::s3::ProcessEnv()));
  TFCKPT_ASSIGN_OR_RETURN(auto client, Client::Create(std::move(settings)));
  if (args[0] == "mb" && args.size() == 2) return client->CreateBucket(url);
  if (args[0] == "put" && args.size() == 3) return PutFile(*client, args[1], url);
  if (args[0] == "tree" && args.size() == 3) return PutTree(*client, args[1], url);
  if (args[0] == "start-upload" && args.size() == 2) return client->CreateMultipartUpload(url).status();
  return absl::InvalidArgumentError("usage: s3_put mb URL | put FILE URL | tree DIR URL | start-upload URL");
}

}  // namespace

int main(int argc, char** argv) {
  const absl::Status s = Main(std::vector<std::string>(argv + 1, argv + argc));
  if (s.ok()) return 0;
  std::fprintf(stderr, "s3_put: %s\n", std::string(s.message()).c_str());
  return 1;
}
