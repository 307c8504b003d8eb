// One conformance suite for every store (storage.h): the local file system, the in-memory
// store, and — run under tests/s3_server.sh, where S3_TEST_ENDPOINT is set — the S3 store
// against the Swift server. Each behaviour the library relies on is checked the same way on
// each: a file is invisible until its commit and then whole, an abandoned one leaves
// nothing, positional writes from several threads, copies from another store's file,
// write-if-absent, reads past the end, listing, globbing, removal, and a failed run undoing
// what it committed.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/s3/client.h"
#include "kvstore/s3/settings.h"
#include "run/run.h"
#include "test_util.h"
#include "base/path.h"
#include "tfckpt/storage.h"

namespace tfckpt::testing {
bool NeedsTestData() { return false; }
}  // namespace tfckpt::testing

namespace {

using tfckpt::Storage;
using tfckpt::WriteOptions;

struct StoreUnderTest {
  std::string name;
  std::string root;  // a directory (or prefix) of its own, empty at the start
};

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// The stores of this run: local and in-memory always; S3 when the test server is there.
std::vector<StoreUnderTest> Stores() {
  static int n = 0;
  ++n;
  std::vector<StoreUnderTest> stores;
  const std::string local = std::filesystem::temp_directory_path() / ("tfckpt-conformance-" + std::to_string(::getpid()) +
                                                                      "-" + std::to_string(n));
  std::filesystem::remove_all(local);
  std::filesystem::create_directories(local);
  stores.push_back({"local", local});
  stores.push_back({"memory", "mem://conformance/" + std::to_string(::getpid()) + "-" + std::to_string(n)});
  if (const char* endpoint = std::getenv("S3_TEST_ENDPOINT")) {
    setenv("AWS_ENDPOINT_URL", endpoint, 1);
    setenv("AWS_ACCESS_KEY_ID", std::getenv("S3_TEST_ACCESS_KEY"), 1);
    setenv("AWS_SECRET_ACCESS_KEY", std::getenv("S3_TEST_SECRET"), 1);
    setenv("AWS_REGION", std::getenv("S3_TEST_REGION"), 1);
    const std::string bucket = "tfckpt-conformance-" + std::to_string(::getpid());
    static bool made = false;
    if (!made) {
      auto settings = tfckpt::s3::ResolveSettings("s3", tfckpt::s3::ProcessEnv());
      REQUIRE(settings.ok());
      auto client = tfckpt::s3::Client::Create(*settings);
      REQUIRE(client.ok());
      REQUIRE((*client)->CreateBucket({"s3", bucket, ""}).ok());
      made = true;
    }
    stores.push_back({"s3", "s3://" + bucket + "/run-" + std::to_string(n)});
  }
  return stores;
}

std::string Read(const std::string& path) {
  auto f = Storage::For(path).OpenForRead(path);
  REQUIRE(f.ok());
  std::string out((*f)->size(), '\0');
  REQUIRE((*f)->ReadAt(0, out.size(), out.data()).ok());
  return out;
}

void Write(const std::string& path, std::string_view bytes, WriteOptions options = {}) {
  auto f = Storage::For(path).Create(path, options);
  REQUIRE(f.ok());
  REQUIRE((*f)->Append(bytes).ok());
  REQUIRE((*f)->Close().ok());
  REQUIRE((*f)->Commit().ok());
  (*f)->Publish();
}

std::vector<std::string> Names(const std::string& dir) {
  auto listing = Storage::For(dir).List(dir);
  std::vector<std::string> names;
  for (const auto& e : listing.ok() ? *listing : std::vector<tfckpt::DirEntry>{}) {
    names.push_back(e.name + (e.kind == tfckpt::EntryKind::kDirectory ? "/" : ""));
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("a file is invisible until its commit, then whole; an abandoned one leaves nothing") {
  for (const StoreUnderTest& s : Stores()) {
    INFO(s.name);
    Storage& store = Storage::For(s.root);
    REQUIRE(store.CreateDirectories(s.root).ok());
    const std::string path = tfckpt::JoinPath(s.root, "a.data");
    const std::string body = RandomBytes((11 << 20) + 3, 1);  // several parts of an object store
    auto f = store.Create(path, WriteOptions{false, 5 << 20});
    REQUIRE(f.ok());
    for (size_t at = 0; at < body.size(); at += 1 << 20) {
      REQUIRE((*f)->Append(std::string_view(body).substr(at, 1 << 20)).ok());
    }
    CHECK((*f)->size() == body.size());
    CHECK(absl::IsNotFound(store.Stat(path).status()));
    REQUIRE((*f)->Close().ok());
    CHECK(absl::IsNotFound(store.Stat(path).status()));
    REQUIRE((*f)->Commit().ok());
    (*f)->Publish();
    auto st = store.Stat(path);
    REQUIRE(st.ok());
    CHECK(st->kind == tfckpt::EntryKind::kFile);
    CHECK(st->size == body.size());
    CHECK(Read(path) == body);
    // Abandoned: destroyed uncommitted, nothing of it remains.
    {
      auto dropped = store.Create(tfckpt::JoinPath(s.root, "dropped"));
      REQUIRE(dropped.ok());
      REQUIRE((*dropped)->Append(body).ok());
    }
    CHECK(absl::IsNotFound(store.Stat(tfckpt::JoinPath(s.root, "dropped")).status()));
    CHECK(Names(s.root) == std::vector<std::string>{"a.data"});
  }
}

TEST_CASE("positional writes from several threads, and copies from another store's file") {
  for (const StoreUnderTest& s : Stores()) {
    INFO(s.name);
    Storage& store = Storage::For(s.root);
    REQUIRE(store.CreateDirectories(s.root).ok());
    const std::string body = RandomBytes((13 << 20) + 7, 2);
    const std::string path = tfckpt::JoinPath(s.root, "p.data");
    auto f = store.Create(path, WriteOptions{false, 5 << 20});
    REQUIRE(f.ok());
    constexpr size_t kPiece = 777777;
    std::atomic<bool> ok{true};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = (body.size() + kPiece - 1) / kPiece; i-- > 0;) {
          if (i % 3 != static_cast<size_t>(t)) continue;
          const size_t at = i * kPiece;
          if (!(*f)->WriteAt(at, std::string_view(body).substr(at, std::min(kPiece, body.size() - at))).ok()) ok = false;
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(ok);
    REQUIRE((*f)->Close().ok());
    REQUIRE((*f)->Commit().ok());
    (*f)->Publish();
    CHECK(Read(path) == body);
    // A copy of a range of a file of another store (memory here; for memory, local).
    const std::string other_root = s.name == "memory" ? std::filesystem::temp_directory_path().string() :
                                   "mem://conformance-source";
    const std::string source = tfckpt::JoinPath(other_root, "source-" + std::to_string(::getpid()) + "-" + s.name);
    Write(source, body);
    auto src = Storage::For(source).OpenForRead(source);
    REQUIRE(src.ok());
    const std::string copy = tfckpt::JoinPath(s.root, "copy.data");
    auto c = store.Create(copy);
    REQUIRE(c.ok());
    REQUIRE((*c)->Append("head").ok());
    REQUIRE((*c)->AppendFrom(**src, 1000, body.size() - 2000).ok());
    REQUIRE((*c)->Close().ok());
    REQUIRE((*c)->Commit().ok());
    (*c)->Publish();
    CHECK(Read(copy) == "head" + body.substr(1000, body.size() - 2000));
    (void)Storage::For(source).Remove(source);
  }
}

TEST_CASE("write-if-absent: a name that is taken is refused and left as it is; otherwise replaced") {
  for (const StoreUnderTest& s : Stores()) {
    INFO(s.name);
    REQUIRE(Storage::For(s.root).CreateDirectories(s.root).ok());
    const std::string path = tfckpt::JoinPath(s.root, "m.index");
    Write(path, "first", WriteOptions{true, 64 << 20});
    auto second = Storage::For(path).Create(path, WriteOptions{true, 64 << 20});
    REQUIRE(second.ok());
    REQUIRE((*second)->Append("second").ok());
    REQUIRE((*second)->Close().ok());
    CHECK(absl::IsAlreadyExists((*second)->Commit()));
    CHECK(Read(path) == "first");
    Write(path, "third");  // not if_absent: replaced
    CHECK(Read(path) == "third");
  }
}

TEST_CASE("reads past the end, missing files, listing, globbing, small files and removal") {
  for (const StoreUnderTest& s : Stores()) {
    INFO(s.name);
    Storage& store = Storage::For(s.root);
    REQUIRE(store.CreateDirectories(tfckpt::JoinPath(s.root, "sub")).ok());
    Write(tfckpt::JoinPath(s.root, "m.data-00000-of-00002"), "0123456789");
    Write(tfckpt::JoinPath(s.root, "m.data-00001-of-00002"), "abc");
    Write(tfckpt::JoinPath(s.root, "sub/x"), "x");
    auto f = store.OpenForRead(tfckpt::JoinPath(s.root, "m.data-00000-of-00002"));
    REQUIRE(f.ok());
    char buf[8];
    CHECK(absl::IsDataLoss((*f)->ReadAt(5, 6, buf)));
    CHECK(absl::IsDataLoss((*f)->ReadAt(UINT64_MAX - 2, 6, buf)));
    std::string scratch;
    auto range = (*f)->Range(2, 3, &scratch);
    REQUIRE(range.ok());
    CHECK(*range == "234");
    const std::string missing = tfckpt::JoinPath(s.root, "missing");
    CHECK(absl::IsNotFound(store.Stat(missing).status()));
    CHECK(absl::IsNotFound(store.OpenForRead(missing).status()));
    CHECK(absl::IsNotFound(store.Remove(missing)));
    CHECK(Names(s.root) == std::vector<std::string>{"m.data-00000-of-00002", "m.data-00001-of-00002", "sub/"});
    auto dir = store.Stat(tfckpt::JoinPath(s.root, "sub"));
    REQUIRE(dir.ok());
    CHECK(dir->kind == tfckpt::EntryKind::kDirectory);
    std::vector<std::string> globbed = store.Glob(tfckpt::JoinPath(s.root, "m.data-*-of-00002"));
    std::sort(globbed.begin(), globbed.end());
    CHECK(globbed == std::vector<std::string>{tfckpt::JoinPath(s.root, "m.data-00000-of-00002"),
                                              tfckpt::JoinPath(s.root, "m.data-00001-of-00002")});
    auto small = store.ReadSmallFile(tfckpt::JoinPath(s.root, "m.data-00001-of-00002"), 3);
    REQUIRE(small.ok());
    CHECK(*small == "abc");
    CHECK_FALSE(store.ReadSmallFile(tfckpt::JoinPath(s.root, "m.data-00000-of-00002"), 3).ok());
    REQUIRE(store.Remove(tfckpt::JoinPath(s.root, "m.data-00001-of-00002")).ok());
    CHECK(absl::IsNotFound(store.Stat(tfckpt::JoinPath(s.root, "m.data-00001-of-00002")).status()));
    REQUIRE(store.RemoveAll(tfckpt::JoinPath(s.root, "sub")).ok());
    CHECK(absl::IsNotFound(store.Stat(tfckpt::JoinPath(s.root, "sub/x")).status()));
  }
}

TEST_CASE("a run that fails removes what it committed; one that succeeds keeps it") {
  for (const StoreUnderTest& s : Stores()) {
    INFO(s.name);
    REQUIRE(Storage::For(s.root).CreateDirectories(s.root).ok());
    const std::string failed = tfckpt::JoinPath(s.root, "failed.data");
    const std::string kept = tfckpt::JoinPath(s.root, "kept.data");
    {
      auto run = std::make_shared<tfckpt::Run>();
      tfckpt::RunScope scope(run.get());
      auto f = Storage::For(failed).Create(failed);
      REQUIRE(f.ok());
      REQUIRE((*f)->Append("x").ok());
      REQUIRE((*f)->Close().ok());
      REQUIRE((*f)->Commit().ok());
      CHECK(Storage::For(failed).Stat(failed).ok());
      run->Undo();
    }
    CHECK(absl::IsNotFound(Storage::For(failed).Stat(failed).status()));
    {
      auto run = std::make_shared<tfckpt::Run>();
      tfckpt::RunScope scope(run.get());
      auto f = Storage::For(kept).Create(kept);
      REQUIRE(f.ok());
      REQUIRE((*f)->Append("y").ok());
      REQUIRE((*f)->Close().ok());
      REQUIRE((*f)->Commit().ok());
      run->Keep();
    }
    CHECK(Read(kept) == "y");
  }
}

}  // namespace
