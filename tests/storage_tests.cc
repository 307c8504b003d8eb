// The Storage layer (storage.h) and its local implementation (src/kvstore/local/).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "kvstore/local/tracked.h"
#include "run/run.h"
#include "base/path.h"
#include "tfckpt/storage.h"

using tfckpt::testing::ReadFile;
using tfckpt::testing::TempDir;
using tfckpt::testing::WriteFile;

namespace {

tfckpt::Storage& Local() { return tfckpt::Storage::Local(); }

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::string& dir) {
  auto listing = Local().List(dir);
  REQUIRE(listing.ok());
  std::vector<std::string> names;
  for (const auto& e : *listing) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

// A readable file held in memory, without a mapping: what an object store's file looks
// like to a writer (the copy forms must read and write it).
class MemoryFile final : public tfckpt::ReadableFile {
 public:
  explicit MemoryFile(std::string bytes) : bytes_(std::move(bytes)) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (offset > size() || n > size() - offset) return PastEndError(offset, n);
    bytes_.copy(out, n, offset);
    ++reads;
    return absl::OkStatus();
  }
  mutable int reads = 0;

 private:
  std::string path_ = "mem://bytes";
  std::string bytes_;
};

std::string Digits(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('0' + i % 10));
  return s;
}

}  // namespace

TEST_CASE("storage: a written file appears under its name only at Commit, and leaves no temporary") {
  TempDir dir;
  const std::string path = dir / "out.bin";
  auto f = Local().Create(path);
  REQUIRE(f.ok());
  REQUIRE((*f)->Append("hello ").ok());
  REQUIRE((*f)->Append("world").ok());
  CHECK((*f)->size() == 11);
  CHECK((*f)->path() == path);
  CHECK_FALSE(Local().Exists(path));
  std::vector<std::string> names = Names(dir.path());
  REQUIRE(names.size() == 1);
  CHECK(names[0].rfind("out.bin.tmp-tfckpt-", 0) == 0);  // the temporary, beside it
  REQUIRE((*f)->Close().ok());
  CHECK_FALSE(Local().Exists(path));
  REQUIRE((*f)->Commit().ok());
  CHECK(ReadFile(path) == "hello world");
  CHECK(Names(dir.path()) == std::vector<std::string>{"out.bin"});
  f->reset();
  CHECK(ReadFile(path) == "hello world");  // destroying a committed file keeps it
}

TEST_CASE("storage: a file destroyed without Commit leaves no trace; an existing file of that name stays") {
  TempDir dir;
  WriteFile(dir / "kept", "old");
  {
    auto f = Local().Create(dir / "kept");
    REQUIRE(f.ok());
    REQUIRE((*f)->Append(std::string(3 << 20, 'x')).ok());  // past the write buffer
    REQUIRE((*f)->Close().ok());
  }
  {
    auto f = Local().Create(dir / "new");
    REQUIRE(f.ok());
    REQUIRE((*f)->WriteAt(10, "abc").ok());
  }
  CHECK(Names(dir.path()) == std::vector<std::string>{"kept"});
  CHECK(ReadFile(dir / "kept") == "old");
}

TEST_CASE("storage: Commit replaces an existing file; misuse is an error, not a crash") {
  TempDir dir;
  WriteFile(dir / "f", "old");
  auto f = Local().Create(dir / "f");
  REQUIRE(f.ok());
  REQUIRE((*f)->Append("new").ok());
  CHECK_FALSE((*f)->Commit().ok());  // before Close
  REQUIRE((*f)->Close().ok());
  CHECK_FALSE((*f)->Close().ok());
  CHECK_FALSE((*f)->Append("more").ok());
  REQUIRE((*f)->Commit().ok());
  CHECK(ReadFile(dir / "f") == "new");
}

TEST_CASE("storage: ReadAt and Range past the end name the file and the offset, overflow-safe") {
  TempDir dir;
  WriteFile(dir / "r", "0123456789");
  auto f = Local().OpenForRead(dir / "r");
  REQUIRE(f.ok());
  CHECK((*f)->path() == dir / "r");
  CHECK((*f)->size() == 10);
  REQUIRE((*f)->mapping().has_value());  // a local file is mapped
  char buf[4];
  REQUIRE((*f)->ReadAt(6, 4, buf).ok());
  CHECK(std::string(buf, 4) == "6789");
  absl::Status s = (*f)->ReadAt(8, 4, buf);
  CHECK(absl::IsDataLoss(s));
  CHECK(std::string(s.message()).find(dir / "r") != std::string::npos);
  CHECK(std::string(s.message()).find("offset 8") != std::string::npos);
  const uint64_t huge = std::numeric_limits<uint64_t>::max() - 2;
  s = (*f)->ReadAt(huge, 4, buf);  // offset + n wraps around
  CHECK(absl::IsDataLoss(s));
  CHECK(std::string(s.message()).find(std::to_string(huge)) != std::string::npos);
  std::string scratch;
  CHECK_FALSE((*f)->Range(4, huge, &scratch).ok());
  auto r = (*f)->Range(2, 3, &scratch);
  REQUIRE(r.ok());
  CHECK(*r == "234");
  CHECK(scratch.empty());  // a view of the mapping, nothing copied
  // Without a mapping, Range reads into the scratch buffer.
  MemoryFile mem("abcdef");
  r = mem.Range(1, 4, &scratch);
  REQUIRE(r.ok());
  CHECK(*r == "bcde");
  CHECK(scratch == "bcde");
  CHECK_FALSE(mem.mapping().has_value());
}

TEST_CASE("storage: opening what is missing or not a file fails with the path") {
  TempDir dir;
  auto missing = Local().OpenForRead(dir / "nope");
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find(dir / "nope") != std::string::npos);
  CHECK_FALSE(Local().OpenForRead(dir.path()).ok());
  auto empty = (WriteFile(dir / "empty", ""), Local().OpenForRead(dir / "empty"));
  REQUIRE(empty.ok());
  CHECK((*empty)->size() == 0);
}

TEST_CASE("storage: listing names, kinds and sizes; stat, exists, glob") {
  TempDir dir;
  WriteFile(dir / "a.index", "12345");
  WriteFile(dir / "b.data", "");
  REQUIRE(Local().CreateDirectories(dir / "sub/inner").ok());
  auto listing = Local().List(dir.path());
  REQUIRE(listing.ok());
  REQUIRE(listing->size() == 3);
  std::sort(listing->begin(), listing->end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  CHECK((*listing)[0].name == "a.index");
  CHECK((*listing)[0].kind == tfckpt::EntryKind::kFile);
  CHECK((*listing)[0].size == 5);
  CHECK((*listing)[1].name == "b.data");
  CHECK((*listing)[2].name == "sub");
  CHECK((*listing)[2].kind == tfckpt::EntryKind::kDirectory);
  CHECK(absl::IsNotFound(Local().List(dir / "none").status()));
  auto st = Local().Stat(dir / "a.index");
  REQUIRE(st.ok());
  CHECK(st->size == 5);
  CHECK(st->mtime_ns > 0);
  CHECK(absl::IsNotFound(Local().Stat(dir / "none").status()));
  CHECK(Local().IsDirectory(dir / "sub/inner"));
  CHECK_FALSE(Local().IsDirectory(dir / "a.index"));
  CHECK(Local().IsFile(dir / "a.index"));
  CHECK(tfckpt::Location::Of(dir / "b.data").Exists());
  CHECK(Local().Glob(dir / "*.index") == std::vector<std::string>{dir / "a.index"});
  CHECK(Local().Glob(dir / "*.nothing").empty());
}

TEST_CASE("storage: small files are read whole, up to a cap") {
  TempDir dir;
  WriteFile(dir / "state", "model_checkpoint_path: \"m\"\n");
  auto text = Local().ReadSmallFile(dir / "state", 100);
  REQUIRE(text.ok());
  CHECK(*text == "model_checkpoint_path: \"m\"\n");
  auto big = Local().ReadSmallFile(dir / "state", 10);
  CHECK_FALSE(big.ok());
  CHECK(std::string(big.status().message()).find(dir / "state") != std::string::npos);
  CHECK(absl::IsNotFound(Local().ReadSmallFile(dir / "none", 10).status()));
}

TEST_CASE("storage: copying a byte range from a readable file, appending and positional") {
  TempDir dir;
  const std::string src_bytes = Digits(3 << 20);
  WriteFile(dir / "src", src_bytes);
  auto src = Local().OpenForRead(dir / "src");
  REQUIRE(src.ok());
  // Appending: bytes before and after a copied range stay in order (in-kernel copy).
  auto out = Local().Create(dir / "appended");
  REQUIRE(out.ok());
  REQUIRE((*out)->Append("<").ok());
  REQUIRE((*out)->AppendFrom(**src, 5, 2 << 20).ok());
  REQUIRE((*out)->Append(">").ok());
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
  CHECK(ReadFile(dir / "appended") == "<" + src_bytes.substr(5, 2 << 20) + ">");
  // Positional: two disjoint ranges written out of order.
  out = Local().Create(dir / "positional");
  REQUIRE(out.ok());
  REQUIRE((*out)->CopyAt(100, **src, 1000, 50).ok());
  REQUIRE((*out)->CopyAt(0, **src, 0, 100).ok());
  CHECK((*out)->size() == 150);
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
  CHECK(ReadFile(dir / "positional") == src_bytes.substr(0, 100) + src_bytes.substr(1000, 50));
  // A source past its end: an error, nothing published.
  out = Local().Create(dir / "short");
  REQUIRE(out.ok());
  CHECK_FALSE((*out)->AppendFrom(**src, src_bytes.size() - 10, 20).ok());
  out->reset();
  CHECK_FALSE(Local().Exists(dir / "short"));
}

TEST_CASE("storage: copying from a file of another medium reads and writes it") {
  TempDir dir;
  const std::string bytes = Digits((1 << 20) + 17);  // more than one read buffer
  MemoryFile mem(bytes);
  auto out = Local().Create(dir / "from-memory");
  REQUIRE(out.ok());
  REQUIRE((*out)->Append("[").ok());
  REQUIRE((*out)->AppendFrom(mem, 3, bytes.size() - 3).ok());
  REQUIRE((*out)->Append("]").ok());
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
  CHECK(mem.reads == 2);
  CHECK(ReadFile(dir / "from-memory") == "[" + bytes.substr(3) + "]");
  out = Local().Create(dir / "positional");
  REQUIRE(out.ok());
  REQUIRE((*out)->CopyAt(4, mem, 0, 4).ok());
  REQUIRE((*out)->CopyAt(0, mem, 10, 4).ok());
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
  CHECK(ReadFile(dir / "positional") == "01230123");
}

// A readable file whose first read waits until it is let go: a positional copy from it
// holds the local file's write lock meanwhile.
class HeldFile final : public tfckpt::ReadableFile {
 public:
  explicit HeldFile(std::string bytes) : bytes_(std::move(bytes)) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (!entered_.exchange(true)) {
      reading.set_value();
      let_go.get_future().wait();
    }
    bytes_.copy(out, n, offset);
    return absl::OkStatus();
  }
  mutable std::promise<void> reading, let_go;

 private:
  mutable std::atomic<bool> entered_ = false;
  std::string path_ = "mem://held";
  std::string bytes_;
};

TEST_CASE("storage: a positional write that finds the file's lock taken goes through a mapping, not waiting") {
  TempDir dir;
  const std::string held = "held:" + Digits(95);  // 100 bytes, in the first page
  const std::string written = Digits((5 << 20) + 3);  // more than one mapping window, unaligned
  const std::string copied_bytes = Digits(3 << 20);
  WriteFile(dir / "src", copied_bytes);
  auto src = Local().OpenForRead(dir / "src");
  REQUIRE(src.ok());
  HeldFile slow(held);
  auto out = Local().Create(dir / "out");
  REQUIRE(out.ok());
  tfckpt::WritableFile& file = **out;
  // One thread copies [0, 100) and is held inside, with the lock.
  auto holder = std::async(std::launch::async, [&] { return file.CopyAt(0, slow, 0, held.size()); });
  slow.reading.get_future().wait();
  // This thread's writes share the held range's page and end past the file's end so far.
  auto other = std::async(std::launch::async, [&] {
    absl::Status s = file.WriteAt(100, written);
    if (s.ok()) s = file.CopyAt(100 + written.size(), **src, 7, (2 << 20) + 1);
    return s;
  });
  // They finish while the lock is held (a write that waited for it would never finish:
  // the guard lets the holder go after a minute, so that the test fails instead of hanging).
  const bool finished = other.wait_for(std::chrono::minutes(1)) == std::future_status::ready;
  slow.let_go.set_value();
  CHECK(finished);
  CHECK(other.get().ok());
  REQUIRE(holder.get().ok());
  CHECK(file.size() == 100 + written.size() + (2 << 20) + 1);
  REQUIRE(file.Close().ok());
  REQUIRE(file.Commit().ok());
  CHECK(ReadFile(dir / "out") == held + written + copied_bytes.substr(7, (2 << 20) + 1));
}

TEST_CASE("storage: move renames over the target; two links to one file lose the source name") {
  TempDir dir;
  WriteFile(dir / "a", "A");
  WriteFile(dir / "b", "B");
  REQUIRE(Local().Move(dir / "a", dir / "b").ok());
  CHECK_FALSE(Local().Exists(dir / "a"));
  CHECK(ReadFile(dir / "b") == "A");
  REQUIRE(Local().Link(dir / "b", dir / "c").ok());
  CHECK_FALSE(Local().Link(dir / "b", dir / "c").ok());  // the new name exists
  REQUIRE(Local().Move(dir / "b", dir / "c").ok());
  CHECK_FALSE(Local().Exists(dir / "b"));
  CHECK(ReadFile(dir / "c") == "A");
  absl::Status s = Local().Move(dir / "none", dir / "d");
  CHECK(absl::IsNotFound(s));
}

TEST_CASE("storage: remove a file or an empty directory; remove a tree") {
  TempDir dir;
  WriteFile(dir / "f", "x");
  REQUIRE(Local().Remove(dir / "f").ok());
  CHECK_FALSE(Local().Exists(dir / "f"));
  CHECK(absl::IsNotFound(Local().Remove(dir / "f")));
  REQUIRE(Local().CreateDirectories(dir / "d/e").ok());
  WriteFile(dir / "d/e/g", "y");
  CHECK_FALSE(Local().Remove(dir / "d").ok());  // not empty
  CHECK(Local().Exists(dir / "d/e/g"));
  REQUIRE(Local().RemoveAll(dir / "d").ok());
  CHECK_FALSE(Local().Exists(dir / "d"));
  REQUIRE(Local().RemoveAll(dir / "d").ok());  // nothing there: fine
}

TEST_CASE("storage: outputs may not be inputs; stale temporaries of dead writers are removed") {
  TempDir dir;
  WriteFile(dir / "in", "x");
  CHECK(Local().CheckNotInputs({dir / "out"}, {dir / "in"}).ok());
  CHECK(absl::IsInvalidArgument(Local().CheckNotInputs({dir.path() + "/./in"}, {dir / "in"})));
  REQUIRE(Local().Link(dir / "in", dir / "alias").ok());
  CHECK(absl::IsInvalidArgument(Local().CheckNotInputs({dir / "alias"}, {dir / "in"})));
  // PID 2^22 + 1 is above Linux's pid_max limit: no such process.
  WriteFile(dir / "m.index.tmp-tfckpt-4194305-0", "");
  const std::string mine = tfckpt::TemporaryName(dir / "m.index");
  WriteFile(mine, "");
  WriteFile(dir / "other.tmp-tfckpt-4194305-0", "");
  const auto removed = Local().RemoveStaleTemporaries(dir.path(), "m.");
  CHECK(removed == std::vector<std::string>{dir / "m.index.tmp-tfckpt-4194305-0"});
  CHECK(Local().Exists(mine));  // this process still runs
  CHECK(Local().Exists(dir / "other.tmp-tfckpt-4194305-0"));  // another stem
}

TEST_CASE("storage: a path's scheme picks its store: local, the object store, memory; per run") {
  CHECK(&tfckpt::Storage::For("/tmp/x") == &tfckpt::Storage::Local());
  CHECK(&tfckpt::Storage::For("relative/x") == &tfckpt::Storage::Local());
  CHECK(&tfckpt::Storage::For("s3://bucket/x") != &tfckpt::Storage::Local());
  CHECK(&tfckpt::Storage::For("gs://bucket/x") == &tfckpt::Storage::For("s3://bucket/y"));
  CHECK(&tfckpt::Storage::For("mem://bucket/x") != &tfckpt::Storage::For("s3://bucket/y"));
  // A scheme no store serves: every call an error naming the path.
  auto none = tfckpt::Storage::For("hdfs://namenode/x").Stat("hdfs://namenode/x");
  CHECK(absl::IsNotFound(none.status()));
  CHECK(std::string(none.status().message()).find("hdfs://namenode/x: no store for this scheme") == 0);
  // Within a run, the run's own object store (its settings and caches are the run's); the
  // in-memory store is the same in every run (tests write with one command, read with the next).
  tfckpt::Storage* outside = &tfckpt::Storage::For("s3://bucket/x");
  {
    auto run = std::make_shared<tfckpt::Run>();
    tfckpt::RunScope scope(run.get());
    tfckpt::Storage* mine = &tfckpt::Storage::For("s3://bucket/x");
    CHECK(mine != outside);
    CHECK(&tfckpt::Storage::For("gs://bucket/z") == mine);
    CHECK(&tfckpt::Storage::For("mem://a/b") == &tfckpt::Storage::For("mem://c/d"));
    run->Keep();
  }
  // A malformed URL is an error of the object store, never a local file named "s3:".
  auto st = tfckpt::Storage::For("s3://Bad_Bucket/x").Stat("s3://Bad_Bucket/x");
  REQUIRE(!st.ok());
  CHECK(absl::IsNotFound(st.status()));
  CHECK(std::string(st.status().message()).find("malformed object URL") != std::string::npos);
}

TEST_CASE("storage: a location is a path and the store it was resolved to, once; the files beside it share it") {
  // (Issue 41: resolved where a path comes in, and passed down; the files that go with it are
  // reached from it, never resolved again.)
  const std::shared_ptr<tfckpt::Storage> memory = tfckpt::NewMemoryStorage();
  std::optional<tfckpt::Location> at;
  {
    tfckpt::RunContext context({.stores = {{"s3", memory}}});
    tfckpt::RunContext::Scope scope(context);
    at = tfckpt::Location::Of("s3://bucket/dir/ckpt");
  }
  REQUIRE(&at->store() == memory.get());
  // Resolved again outside that run, the same path is another store's; the location's
  // files are still the store it was resolved to.
  CHECK(&tfckpt::Storage::For("s3://bucket/dir/ckpt") != memory.get());
  const tfckpt::Location index = at->Sibling(".index");
  CHECK(index.path() == "s3://bucket/dir/ckpt.index");
  CHECK(&index.store() == memory.get());
  CHECK(at->Parent().path() == "s3://bucket/dir");
  CHECK(at->Parent().Child("checkpoint").path() == "s3://bucket/dir/checkpoint");
  CHECK(&at->Parent().Child("checkpoint").store() == memory.get());
  CHECK(&at->At("s3://bucket/other").store() == memory.get());
  CHECK_FALSE(index.Exists());
  {
    auto f = index.store().Create(index.path());
    REQUIRE(f.ok());
    REQUIRE((*f)->Append("bytes").ok());
    REQUIRE((*f)->Close().ok());
    REQUIRE((*f)->Commit().ok());
    (*f)->Publish();
  }
  CHECK(memory->Exists("s3://bucket/dir/ckpt.index"));
  CHECK(index.Exists());
  CHECK(index.IsFile());
  auto st = index.Stat();
  REQUIRE(st.ok());
  CHECK(st->size == 5);
  auto read = index.OpenForRead();
  REQUIRE(read.ok());
  CHECK((*read)->size() == 5);
  CHECK(index.Remove().ok());
  CHECK_FALSE(memory->Exists("s3://bucket/dir/ckpt.index"));
  // A local path: the local file system.
  CHECK(&tfckpt::Location::Of("relative/x").store() == &tfckpt::Storage::Local());
  CHECK(&tfckpt::Location::Of("/tmp/x").Sibling(".index").store() == &tfckpt::Storage::Local());
}

TEST_CASE("paths: dirname, basename, join (no file system)") {
  using tfckpt::Basename;
  using tfckpt::Dirname;
  using tfckpt::JoinPath;
  CHECK(Dirname("a/b/c") == "a/b");
  CHECK(Dirname("a//c") == "a");
  CHECK(Dirname("/c") == "/");
  CHECK(Dirname("c") == "");
  CHECK(Dirname("a/b/") == "a/b");
  CHECK(tfckpt::DirectoryOf("c") == ".");
  CHECK(Basename("a/b/c") == "c");
  CHECK(Basename("a/b/") == "");
  CHECK(Basename("c") == "c");
  CHECK(JoinPath("a", "b") == "a/b");
  CHECK(JoinPath("a/", "b") == "a/b");
  CHECK(JoinPath("a", "/abs") == "/abs");
  CHECK(JoinPath("a", ".") == "a/");
  CHECK(JoinPath("", "b") == "b");
}

TEST_CASE("paths: object URLs keep their SCHEME://BUCKET root") {
  using tfckpt::Basename;
  using tfckpt::Dirname;
  using tfckpt::JoinPath;
  CHECK(tfckpt::IsUrl("s3://b/k"));
  CHECK(tfckpt::IsUrl("gs://b"));
  CHECK(!tfckpt::IsUrl("a/s3://b"));
  CHECK(!tfckpt::IsUrl("/tmp/x"));
  CHECK(Dirname("s3://b/dir/m") == "s3://b/dir");
  CHECK(Dirname("s3://b/m") == "s3://b");
  CHECK(Dirname("s3://b") == "s3://b");
  CHECK(Dirname("s3://b/") == "s3://b");
  CHECK(Dirname("gs://b/dir/") == "gs://b/dir");
  CHECK(Basename("s3://b/dir/m") == "m");
  CHECK(JoinPath(Dirname("s3://b/m"), "checkpoint") == "s3://b/checkpoint");
  CHECK(JoinPath("s3://b/dir/", "m") == "s3://b/dir/m");
  CHECK(JoinPath("s3://b/dir", "gs://c/m") == "gs://c/m");
  CHECK(JoinPath("s3://b/dir", ".") == "s3://b/dir/");
}
