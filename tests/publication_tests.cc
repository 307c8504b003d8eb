// Publication (publish/publication.h), the one owner of "write, verify, publish": what it
// refuses, what it publishes when, and what it leaves when a run does not finish; and the
// writers that publish through it (MergeBundles) doing so.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "test_util.h"
#include "format/bundle/bundle_merge.h"
#include "format/bundle/bundle_writer.h"
#include "publish/publication.h"
#include "run/run.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

using tfckpt::Publication;
using tfckpt::testing::ReadFile;
using tfckpt::testing::TempDir;
using tfckpt::testing::WriteFile;

namespace {

constexpr int32_t kFloat = static_cast<int32_t>(tfckpt::DType::kFloat);

// Names in `dir`, sorted.
std::vector<std::string> Names(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A checkpoint "in" holding "a" (float32 [1]), written by the library.
std::string Input(const TempDir& dir, const std::string& name = "in") {
  const std::string prefix = dir / name;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("a", kFloat, {1}, std::string(4, '\1')).ok());
  REQUIRE((*w)->Finish().ok());
  return prefix;
}

// `paths` created, written ("new PATH") and handed to `p`, in order; the files, which must
// outlive its commit.
std::vector<std::unique_ptr<tfckpt::WritableFile>> WriteFiles(Publication& p, const std::vector<std::string>& paths) {
  std::vector<std::unique_ptr<tfckpt::WritableFile>> files;
  for (const std::string& path : paths) {
    auto f = tfckpt::Storage::For(path).Create(path);
    REQUIRE(f.ok());
    REQUIRE((*f)->Append("new " + path).ok());
    REQUIRE((*f)->Close().ok());
    p.Add(**f);
    files.push_back(*std::move(f));
  }
  return files;
}

// `paths`, each resolved.
std::vector<tfckpt::Location> Locations(const std::vector<std::string>& paths) {
  std::vector<tfckpt::Location> out;
  for (const std::string& p : paths) out.push_back(tfckpt::Location::Of(p));
  return out;
}

}  // namespace

TEST_CASE("publication: files appear only at the commit, in order; an existing one needs --force") {
  TempDir dir;
  const std::vector<std::string> paths{dir / "a.safetensors", dir / "a.index.json"};
  WriteFile(paths[1], "old");
  CHECK(absl::IsAlreadyExists(Publication::Files(Locations(paths), {}, false).status()));
  CHECK(absl::IsInvalidArgument(Publication::Files(Locations(paths), {paths[1]}, true).status()));  // an input
  auto p = Publication::Files(Locations(paths), {}, true);
  REQUIRE(p.ok());
  const auto files = WriteFiles(**p, paths);
  CHECK_FALSE(tfckpt::Location::Of(paths[0]).Exists());  // nothing under the final names yet
  CHECK(ReadFile(paths[1]) == "old");
  REQUIRE((*p)->CommitFiles().ok());
  CHECK(ReadFile(paths[0]) == "new " + paths[0]);
  CHECK(ReadFile(paths[1]) == "new " + paths[1]);
  CHECK(absl::IsFailedPrecondition((*p)->CommitFiles()));  // once
}

TEST_CASE("publication: a bundle whose check before the commit fails publishes nothing, and --force keeps the old") {
  TempDir dir;
  const std::string in = Input(dir);
  const std::vector<std::string> before = Names(dir);
  for (const bool force : {false, true}) {
    CAPTURE(force);
    const std::string out = force ? in : dir / "out";
    tfckpt::BundleWriterOptions o;
    o.overwrite = force;
    o.before_commit = [&](const tfckpt::WrittenOutput& written) {
      // The output is there to be read by its final names, and nothing else is.
      CHECK(written.open(out + ".index").ok());
      CHECK(written.open(tfckpt::DataFileName(out, 0, 1)).ok());
      CHECK(absl::IsNotFound(written.open(dir / "elsewhere").status()));
      return absl::DataLossError("refused");
    };
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(out), o);
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("b", kFloat, {1}, std::string(4, '\2')).ok());
    CHECK(absl::IsDataLoss((*w)->Finish()));
    w->reset();
    CHECK(Names(dir) == before);  // no temporaries, nothing new, the old checkpoint whole
  }
  auto c = tfckpt::OpenCheckpoint(in);
  REQUIRE(c.ok());
  CHECK((*c)->Find("a") != nullptr);
  CHECK((*c)->Find("b") == nullptr);
}

TEST_CASE("publication: a staged link is removed when the publication is abandoned; the input stays") {
  TempDir dir;
  const std::string in = Input(dir);
  const std::vector<std::string> before = Names(dir);
  {
    auto p = Publication::Bundle(tfckpt::Location::Of(dir / "out"), {});
    REQUIRE(p.ok());
    REQUIRE((*p)->Stage(tfckpt::Location::Of(tfckpt::DataFileName(in, 0, 1)), tfckpt::DataFileName(dir / "out", 0, 1),
                        tfckpt::ServerSideCopy::kNever)
                .ok());
    CHECK(Names(dir).size() == before.size() + 1);  // the link, under a temporary name
  }
  CHECK(Names(dir) == before);
}

TEST_CASE("publication: data going straight under the final names first takes the old index away, with --force") {
  TempDir dir;
  const std::string in = Input(dir);
  const absl::Status refused = Publication::ClearIndexForDataInPlace(tfckpt::Location::Of(in), false, "refused: use --force");
  CHECK(absl::IsAlreadyExists(refused));
  CHECK(refused.message() == "refused: use --force");
  CHECK(tfckpt::Location::Of(in + ".index").Exists());
  REQUIRE(Publication::ClearIndexForDataInPlace(tfckpt::Location::Of(in), true, "").ok());
  CHECK_FALSE(tfckpt::Location::Of(in + ".index").Exists());
  CHECK(tfckpt::Location::Of(tfckpt::DataFileName(in, 0, 1)).Exists());  // (its data: the task's to replace)
  CHECK(Publication::ClearIndexForDataInPlace(tfckpt::Location::Of(in), false, "").ok());  // none there
}

TEST_CASE("merge publishes through a publication: stray data files at the output need --force; a killed "
          "writer's temporaries there are removed") {
  TempDir dir;
  const std::string in = Input(dir);
  const std::string out = dir / "out";
  WriteFile(tfckpt::DataFileName(out, 0, 1), "stray");  // no index: what a killed run may leave
  auto refused = tfckpt::MergeBundles({in}, out, {});
  REQUIRE(absl::IsAlreadyExists(refused.status()));
  CHECK(std::string(refused.status().message()).find("use --force") != std::string::npos);
  // PID 2^22 + 1 is above Linux's pid_max limit: a writer that is gone.
  const std::string stale = dir / "out.index.tmp-tfckpt-4194305-0";
  WriteFile(stale, "");
  tfckpt::MergeOptions o;
  o.overwrite = true;
  REQUIRE(tfckpt::MergeBundles({in}, out, o).ok());
  CHECK_FALSE(tfckpt::Location::Of(stale).Exists());
  auto c = tfckpt::OpenCheckpoint(out);
  REQUIRE(c.ok());
  CHECK((*c)->Find("a") != nullptr);
}

TEST_CASE("publication: an output checked after its commit that fails is removed and says so; a stop keeps it") {
  // (Issue 41 item 4: the check after the commit of safetensors, .npz, merge --move and
  // --finalize is the publication's: it removes the output, or keeps it, and ends the error.)
  TempDir dir;
  const std::vector<std::string> paths{dir / "m-1.safetensors", dir / "m.index.json"};
  const auto publish = [&]() {
    auto p = Publication::Files(Locations(paths), {}, true);
    REQUIRE(p.ok());
    const auto files = WriteFiles(**p, paths);
    CHECK(absl::IsFailedPrecondition((*p)->CheckCommitted([] { return absl::OkStatus(); })));  // not yet
    REQUIRE((*p)->CommitFiles().ok());
    return *std::move(p);
  };
  SUBCASE("passed: kept") {
    auto p = publish();
    CHECK(p->CheckCommitted([] { return absl::OkStatus(); }).ok());
    for (const std::string& path : paths) CHECK(tfckpt::Location::Of(path).Exists());
  }
  SUBCASE("failed: every file removed; the error's code, check id and tensor kept, its message ended") {
    auto p = publish();
    const absl::Status s = p->CheckCommitted(
        [&] { return tfckpt::DataLossAt("output.mismatch", paths[0], "b", -1, "against.values: differ"); });
    CHECK(absl::IsDataLoss(s));
    CHECK(tfckpt::ErrorInfoOf(s).check == "output.mismatch");
    CHECK(tfckpt::ErrorInfoOf(s).key == "b");
    CHECK(absl::EndsWith(s.message(), "against.values: differ; removed the output"));
    CHECK(Names(dir).empty());
  }
  SUBCASE("stopped: the run's undo is what removes; the message is the stop's") {
    auto p = publish();
    const absl::Status s = p->CheckCommitted([] { return absl::CancelledError("interrupted"); });
    CHECK(s.message() == "interrupted");
    for (const std::string& path : paths) CHECK(tfckpt::Location::Of(path).Exists());
  }
}

TEST_CASE("merge --move: an output failing its check after the commit is kept (all that is left); one moved from "
          "temporaries is removed, and their directory goes") {
  TempDir dir;
  const std::string in = Input(dir);
  const std::string part = Input(dir, "tmp/task-0/part");
  const auto failing = [] { return absl::DataLossError("out.index: \"a\": crc: differs"); };
  tfckpt::MergeOptions o;
  o.move = true;
  o.after_commit = failing;
  auto kept = tfckpt::MergeBundles({in}, dir / "out", o);
  CHECK(kept.status().message() == "out.index: \"a\": crc: differs");  // no word of a removal
  CHECK(tfckpt::Location::Of(dir / "out.index").Exists());
  CHECK(tfckpt::Location::Of(tfckpt::DataFileName(dir / "out", 0, 1)).Exists());
  CHECK_FALSE(tfckpt::Location::Of(in + ".index").Exists());  // the input consumed before the check
  o.temporaries = dir / "tmp";
  SUBCASE("failed: removed") {
    auto removed = tfckpt::MergeBundles({part}, dir / "fin", o);
    CHECK(removed.status().message() == "out.index: \"a\": crc: differs; removed the output");
    CHECK_FALSE(tfckpt::Location::Of(dir / "fin.index").Exists());
    CHECK_FALSE(tfckpt::Location::Of(tfckpt::DataFileName(dir / "fin", 0, 1)).Exists());
  }
  SUBCASE("passed: kept") {
    bool checked = false;
    o.after_commit = [&] {
      checked = true;
      CHECK_FALSE(std::filesystem::exists(dir / "tmp"));  // (the temporaries go before the check)
      return absl::OkStatus();
    };
    REQUIRE(tfckpt::MergeBundles({part}, dir / "fin", o).ok());
    CHECK(checked);
    CHECK(tfckpt::OpenCheckpoint(dir / "fin").ok());
  }
  CHECK_FALSE(std::filesystem::exists(dir / "tmp"));
}
