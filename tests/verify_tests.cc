// Unit tests of VerifyWritten (verify.h): an output that matches its sources verifies and
// stays; one with a wrong value, a broken CRC, a dtype or a tensor it should not have fails
// with one output.mismatch error naming the file and the tensor (and is left where it is:
// its removal is the publication's, tests/publication_tests.cc).
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <vector>

#include "test_util.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "convert/convert.h"
#include "base/float_convert.h"
#include "model/tensor_encoding.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "run/run.h"
#include "tfckpt/run.h"
#include "verify/verify.h"

namespace {

namespace fs = std::filesystem;
using tfckpt::testing::TempDir;

// "a" float32 [4, 3] = 0.25 * i (with `changed` added to element 7), "b" int32 [3].
void WriteBundle(const std::string& prefix, float changed = 0, const char* a_name = "a", bool bf16 = false) {
  std::vector<float> a(12);
  std::vector<uint16_t> a16(12);
  for (int i = 0; i < 12; ++i) {
    a[i] = 0.25f * static_cast<float>(i) + (i == 7 ? changed : 0);
    a16[i] = tfckpt::FloatToBFloat16(a[i]);
  }
  const std::vector<int32_t> b{1, 2, 3};
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  REQUIRE(w.ok());
  const std::string pa = bf16 ? std::string(reinterpret_cast<const char*>(a16.data()), 24)
                              : std::string(reinterpret_cast<const char*>(a.data()), 48);
  REQUIRE((*w)->Add(a_name, bf16 ? 14 : 1, {4, 3}, pa).ok());
  REQUIRE((*w)->Add("b", 3, {3}, std::string(reinterpret_cast<const char*>(b.data()), 12)).ok());
  REQUIRE((*w)->Finish().ok());
}

std::unique_ptr<tfckpt::Checkpoint> Open(const std::string& spec) {
  auto c = tfckpt::OpenCheckpoint(spec);
  REQUIRE(c.ok());
  return std::move(*c);
}

// Checks `r` is the one mismatch error naming `tensor`, and the output's files are left
// where they are (removing them is its publication's: Publication::CheckCommitted).
void CheckMismatch(const absl::StatusOr<tfckpt::VerifyReport>& r, const std::vector<std::string>& files,
                  const std::string& tensor, const std::string& what) {
  REQUIRE_FALSE(r.ok());
  const std::string msg(r.status().message());
  CAPTURE(msg);
  CHECK(tfckpt::ErrorInfoOf(r.status()).check == "output.mismatch");
  CHECK(tfckpt::ErrorInfoOf(r.status()).key == tensor);
  CHECK(msg.find("\"" + tensor + "\"") != std::string::npos);
  CHECK(msg.find(what) != std::string::npos);
  CHECK(msg.find("removed the output") == std::string::npos);
  for (const std::string& f : files) CHECK(fs::exists(f));
}

}  // namespace

TEST_CASE("VerifyWritten keeps an output equal to its input") {
  TempDir dir;
  WriteBundle(dir / "in");
  WriteBundle(dir / "out");
  auto in = Open(dir / "in");
  const auto files = tfckpt::BundleFiles(dir / "out", 1);
  auto r = tfckpt::VerifyWritten(dir / "out", {{in.get()}}, {});
  CAPTURE(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->tensors == 2);
  CHECK(r->bytes_compared == 60);
  for (const std::string& f : files) CHECK(fs::exists(f));
}

TEST_CASE("VerifyWritten is its run's verifying phase: the output's bytes, each counted once when checked") {
  // Issue 28 A8: whoever verifies (before a commit, after it: an object store's output, a
  // safetensors or .npz file, --finalize), the run shows the phase with its real total.
  TempDir dir;
  WriteBundle(dir / "in");
  WriteBundle(dir / "out");
  auto in = Open(dir / "in");
  struct Phase {
    std::string name;
    uint64_t total = 0;
    const std::atomic<uint64_t>* done = nullptr;
    uint64_t final_done = 0;  // the counter when the next call came
  };
  std::vector<Phase> phases;
  tfckpt::RunOptions o;
  o.progress = [&](std::string_view phase, uint64_t total, const std::atomic<uint64_t>* done) {
    if (!phases.empty()) phases.back().final_done = phases.back().done->load();
    if (done != nullptr) phases.push_back({std::string(phase), total, done, 0});
  };
  // "a" compared with one source, "b" with another: both counted once, as is the report's
  // count of bytes compared; and with no source naming "b", it is counted when checked alone.
  const tfckpt::VerifySource only_a{in.get(), std::map<std::string, std::string>{{"a", "a"}}};
  const tfckpt::VerifySource only_b{in.get(), std::map<std::string, std::string>{{"b", "b"}}};
  for (const auto& sources : {std::vector<tfckpt::VerifySource>{only_a, only_b}, std::vector<tfckpt::VerifySource>{only_a}}) {
    phases.clear();
    absl::StatusOr<tfckpt::VerifyReport> r;
    {
      tfckpt::Run run(o);
      tfckpt::RunScope scope(&run);
      r = tfckpt::VerifyWritten(dir / "out", sources, {});
      run.Keep();
    }
    CAPTURE(sources.size());
    REQUIRE(r.ok());
    CHECK(r->bytes_compared == (sources.size() == 2 ? 60 : 48));
    REQUIRE(phases.size() == 1);
    CHECK(phases[0].name == "verifying");
    CHECK(phases[0].total == 60);
    CHECK(phases[0].final_done == 60);
  }
}

TEST_CASE("VerifyWritten fails an output whose values differ from the input") {
  TempDir dir;
  WriteBundle(dir / "in");
  WriteBundle(dir / "out", 5);  // valid CRCs, one wrong value
  auto in = Open(dir / "in");
  const auto files = tfckpt::BundleFiles(dir / "out", 1);
  CheckMismatch(tfckpt::VerifyWritten(dir / "out", {{in.get()}}, {}), files, "a",
               "against.values: 1 of 12 elements differ; first at [2, 1]");
}

TEST_CASE("VerifyWritten fails an output whose CRC does not hold") {
  TempDir dir;
  WriteBundle(dir / "in");
  WriteBundle(dir / "out");
  const std::string data = tfckpt::DataFileName(dir / "out", 0, 1);
  std::string bytes = tfckpt::testing::ReadFile(data);
  bytes[4] ^= 0x01;  // inside "a"
  tfckpt::testing::WriteFile(data, bytes);
  auto in = Open(dir / "in");
  const auto files = tfckpt::BundleFiles(dir / "out", 1);
  SUBCASE("a tensor compared with its source") {
    CheckMismatch(tfckpt::VerifyWritten(dir / "out", {{in.get()}}, {}), files, "a", "crc");
  }
  SUBCASE("a tensor no source names (e.g. an averaged one)") {
    tfckpt::VerifySource only_b{in.get(), std::map<std::string, std::string>{{"b", "b"}}};
    CheckMismatch(tfckpt::VerifyWritten(dir / "out", {only_b}, {}), files, "a", "crc");
  }
}

TEST_CASE("VerifyWritten follows renames and compares casts as cast") {
  TempDir dir;
  WriteBundle(dir / "in");
  WriteBundle(dir / "out", 0, "x", /*bf16=*/true);
  auto in = Open(dir / "in");
  const auto files = tfckpt::BundleFiles(dir / "out", 1);
  tfckpt::VerifySource renamed{in.get(), std::map<std::string, std::string>{{"x", "a"}, {"b", "b"}}};
  tfckpt::VerifyOptions cast;
  cast.cast = true;
  auto r = tfckpt::VerifyWritten(dir / "out", {renamed}, cast);
  CAPTURE(r.status().ToString());
  CHECK(r.ok());
  // Without the cast the dtype change is a mismatch; a source that misses a name too.
  CheckMismatch(tfckpt::VerifyWritten(dir / "out", {renamed}, {}), files, "x", "against.dtype");
}

TEST_CASE("VerifyWritten fails an output with a tensor its source does not have") {
  TempDir dir;
  WriteBundle(dir / "in");
  WriteBundle(dir / "out", 0, "c");
  auto in = Open(dir / "in");
  const auto files = tfckpt::BundleFiles(dir / "out", 1);
  CheckMismatch(tfckpt::VerifyWritten(dir / "out", {{in.get()}}, {}), files, "a", "against.removed");
}

TEST_CASE("VerifyWritten reads safetensors output back and compares its values") {
  TempDir dir;
  WriteBundle(dir / "in");
  auto in = Open(dir / "in");
  const std::string out = dir / "m.safetensors";
  auto w = tfckpt::WriteSafetensors(*in, out, {});
  REQUIRE(w.ok());
  CHECK(w->sources == std::map<std::string, std::string>{{"a", "a"}, {"b", "b"}});
  REQUIRE(tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, {}).ok());
  std::string bytes = tfckpt::testing::ReadFile(out);
  bytes[bytes.size() - 1] ^= 0x01;  // the last byte of "b", the last tensor
  tfckpt::testing::WriteFile(out, bytes);
  CheckMismatch(tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, {}), w->files, "b",
               "against.values: 1 of 3 elements differ; first at [2]");
}

TEST_CASE("VerifyWritten reads .npz output back and compares its values") {
  TempDir dir;
  WriteBundle(dir / "in");
  auto in = Open(dir / "in");
  const std::string out = dir / "m.npz";
  auto w = tfckpt::WriteNpz(*in, out, {});
  REQUIRE(w.ok());
  tfckpt::VerifyOptions npz;
  npz.format = tfckpt::Format::kNpz;
  auto r = tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, npz);
  CAPTURE(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->tensors == 2);
  // A wrong value under a matching CRC-32: rewrite the member's last byte and its CRC is
  // what libzip refuses; either way the output fails naming "b".
  std::string bytes = tfckpt::testing::ReadFile(out);
  const size_t at = bytes.rfind(std::string("\x03\0\0\0", 4));  // the last element of "b"
  REQUIRE(at != std::string::npos);
  bytes[at] = 4;
  tfckpt::testing::WriteFile(out, bytes);
  CheckMismatch(tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, npz), w->files, "b", "b.npy");
}

TEST_CASE("VerifyWritten: .npz strings that lose trailing NUL bytes (NumPy cannot keep them) still verify") {
  TempDir dir;
  std::string payload;
  const std::vector<std::string_view> words{std::string_view("ab\0", 3), "c"};
  tfckpt::EncodeStrings(words, &payload);
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "in"));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("words", 7, {2}, payload).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto in = Open(dir / "in");
  const std::string out = dir / "m.npz";
  auto w = tfckpt::WriteNpz(*in, out, {});
  REQUIRE(w.ok());
  REQUIRE(w->notes.size() == 1);  // convert says they are lost
  tfckpt::VerifyOptions npz;
  npz.format = tfckpt::Format::kNpz;
  auto r = tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, npz);
  CAPTURE(r.status().ToString());
  CHECK(r.ok());
  CHECK(fs::exists(out));
}

// Float32 "t" [6, 2] = 0.5 * i (+ `changed` on element 5), in row slices ending at `cuts`
// (e.g. {3, 6}: rows [0, 3) and [3, 6)), written positionally; with `read_back` the writer
// reads each piece back, and `check` is run before the commit with what it hands over.
void WriteRows(const std::string& prefix, const std::vector<int64_t>& cuts, bool read_back = false,
               const tfckpt::BeforeCommit& check = {}, float changed = 0) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = 0.5f * static_cast<float>(i) + (i == 5 ? changed : 0);
  tfckpt::BundleWriterOptions o;
  if (read_back) o.read_back = [](std::string_view) { return true; };
  o.before_commit = check;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  REQUIRE(w.ok());
  int64_t row = 0;
  for (int64_t end : cuts) {
    const std::string bytes(reinterpret_cast<const char*>(v.data() + row * 2), static_cast<size_t>((end - row) * 8));
    REQUIRE((*w)->AddAt("t", 1, {6, 2}, tfckpt::Region{{row, 0}, {end - row, 2}}, bytes, 0,
                        static_cast<uint64_t>(row * 8)).ok());
    row = end;
  }
  REQUIRE((*w)->Finish().ok());
}

TEST_CASE("BundleWriter read_back: every positional piece is read back, and the writer says which") {
  TempDir dir;
  std::vector<std::tuple<int32_t, uint64_t, uint64_t>> seen;
  bool called = false;
  WriteRows(dir / "out", {2, 4, 6}, /*read_back=*/true, [&](const tfckpt::WrittenOutput& w) {
    called = true;
    REQUIRE(w.read_back);
    CHECK(w.read_back(0, 0, 16));
    CHECK(w.read_back(0, 16, 16));
    CHECK(w.read_back(0, 32, 16));
    CHECK_FALSE(w.read_back(0, 0, 48));  // not an entry
    CHECK_FALSE(fs::exists(dir / "out.index"));  // nothing published yet
    auto f = w.open(dir / "out.data-00000-of-00001");  // the temporary, by its final name
    REQUIRE(f.ok());
    CHECK((*f)->path() == dir / "out.data-00000-of-00001");
    CHECK((*f)->size() == 48);
    return absl::OkStatus();
  });
  CHECK(called);
  CHECK(fs::exists(dir / "out.index"));
  // Without read_back nothing is named.
  WriteRows(dir / "plain", {6}, false, [&](const tfckpt::WrittenOutput& w) {
    CHECK_FALSE(w.read_back(0, 0, 48));
    return absl::OkStatus();
  });
}

TEST_CASE("BundleWriter: an error before the commit publishes nothing") {
  TempDir dir;
  WriteRows(dir / "out", {6});
  const std::string before = tfckpt::testing::ReadFile(dir / "out.data-00000-of-00001");
  tfckpt::BundleWriterOptions o;
  o.overwrite = true;
  o.before_commit = [](const tfckpt::WrittenOutput&) { return absl::DataLossError("planted"); };
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "out"), o);
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("other", 3, {1}, std::string(4, '\1')).ok());
  CHECK((*w)->Finish().message() == "planted");
  w->reset();
  CHECK(tfckpt::testing::ReadFile(dir / "out.data-00000-of-00001") == before);  // the old checkpoint, as it was
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"out.data-00000-of-00001", "out.index"});  // no temporaries
}

// VerifyWritten of `out` against `in` before a commit, with `read_back` as the writer's.
absl::StatusOr<tfckpt::VerifyReport> VerifyTrusting(const std::string& out, const tfckpt::Checkpoint& in,
                                                    std::function<bool(int32_t, uint64_t, uint64_t)> read_back) {
  tfckpt::WrittenOutput written;
  written.open = [](const std::string& path) { return tfckpt::Storage::For(path).OpenForRead(path); };
  written.read_back = std::move(read_back);
  tfckpt::VerifyOptions o;
  o.written = &written;
  return tfckpt::VerifyWritten(out, {{&in}}, o);
}

TEST_CASE("VerifyWritten: pieces read back are compared by their CRCs alone, over any cut") {
  TempDir dir;
  WriteRows(dir / "in", {3, 6});
  auto in = Open(dir / "in");
  const auto all = [](int32_t, uint64_t, uint64_t) { return true; };
  for (const std::vector<int64_t>& cuts : std::vector<std::vector<int64_t>>{{6}, {1, 2, 3, 4, 5, 6}, {2, 4, 6}, {3, 6}}) {
    const std::string out = dir / ("out" + std::to_string(cuts.size()));
    WriteRows(out, cuts);
    CAPTURE(cuts.size());
    CHECK(VerifyTrusting(out, *in, all).ok());
    // The proof is the CRCs alone: bytes changed under an entry whose CRC is trusted are not
    // read (a writer that read them back would have failed there). Not trusted, they are.
    std::string bytes = tfckpt::testing::ReadFile(out + ".data-00000-of-00001");
    bytes[44] ^= 1;
    tfckpt::testing::WriteFile(out + ".data-00000-of-00001", bytes);
    CHECK(VerifyTrusting(out, *in, all).ok());
    auto r = VerifyTrusting(out, *in, {});
    REQUIRE_FALSE(r.ok());
    CHECK(tfckpt::ErrorInfoOf(r.status()).check == "output.mismatch");
    CHECK(std::string(r.status().message()).find("nothing was written") != std::string::npos);
  }
}

TEST_CASE("VerifyWritten: CRCs that do not match the input's fall back to the values and name the tensor") {
  TempDir dir;
  WriteRows(dir / "in", {3, 6});
  auto in = Open(dir / "in");
  WriteRows(dir / "out", {2, 4, 6}, false, {}, /*changed=*/1.0f);  // honest CRCs of other values
  auto r = VerifyTrusting(dir / "out", *in, [](int32_t, uint64_t, uint64_t) { return true; });
  REQUIRE_FALSE(r.ok());
  const std::string msg(r.status().message());
  CAPTURE(msg);
  CHECK(tfckpt::ErrorInfoOf(r.status()).check == "output.mismatch");
  CHECK(tfckpt::ErrorInfoOf(r.status()).key == "t");
  CHECK(msg.find("1 of 12 elements differ") != std::string::npos);
}

TEST_CASE("VerifyWritten: a tensor with one piece not read back is read (CRCs prove only whole read-back tensors)") {
  TempDir dir;
  WriteRows(dir / "in", {3, 6});
  auto in = Open(dir / "in");
  const std::string out = dir / "out";
  WriteRows(out, {2, 4, 6});
  std::string bytes = tfckpt::testing::ReadFile(out + ".data-00000-of-00001");
  bytes[44] ^= 1;  // inside the last piece, rows [4, 6) at offset 32
  tfckpt::testing::WriteFile(out + ".data-00000-of-00001", bytes);
  auto r = VerifyTrusting(out, *in, [](int32_t, uint64_t offset, uint64_t) { return offset != 32; });
  REQUIRE_FALSE(r.ok());
  CHECK(tfckpt::ErrorInfoOf(r.status()).check == "output.mismatch");
}

TEST_CASE("BundleWriter: overlapping positional entries are refused at Finish, and nothing is published") {
  TempDir dir;
  tfckpt::BundleWriterOptions o;
  o.read_back = [](std::string_view) { return true; };
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "out"), o);
  REQUIRE(w.ok());
  const std::string eight(8, '\2');
  REQUIRE((*w)->AddAt("a", 1, {2}, std::nullopt, eight, 0, 0).ok());
  REQUIRE((*w)->AddAt("b", 1, {2}, std::nullopt, eight, 0, 4).ok());  // overwrites half of "a"
  const absl::Status st = (*w)->Finish();
  CHECK(absl::IsInternal(st));
  CHECK(std::string(st.message()).find("overlap") != std::string::npos);
  w->reset();
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("WrittenOutput::open answers NotFound for any name that is not one of the output's files") {
  TempDir dir;
  WriteRows(dir / "out", {6});  // an existing checkpoint that --force would replace
  tfckpt::BundleWriterOptions o;
  o.overwrite = true;
  o.before_commit = [&](const tfckpt::WrittenOutput& written) {
    CHECK(written.open(dir / "out.data-00000-of-00001").ok());  // the new one's temporary
    auto other = written.open(dir / "out.data-00001-of-00002");
    CHECK(absl::IsNotFound(other.status()));
    tfckpt::testing::WriteFile(dir / "stray", "x");
    CHECK(absl::IsNotFound(written.open(dir / "stray").status()));  // exists, but not written here
    return absl::OkStatus();
  };
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "out"), o);
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("x", 3, {1}, std::string(4, '\1')).ok());
  REQUIRE((*w)->Finish().ok());
}

TEST_CASE("VerifyWritten: a safetensors output is proved by the input's CRCs, reading the input no more") {
  TempDir dir;
  WriteRows(dir / "in", {3, 6});
  auto in = Open(dir / "in");
  const std::string out = dir / "m.safetensors";
  auto w = tfckpt::WriteSafetensors(*in, out, {});
  REQUIRE(w.ok());
  tfckpt::VerifyOptions st;
  st.format = tfckpt::Format::kSafetensors;
  CHECK(tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, st).ok());
  // The input's bytes changed after the copy (its stored CRCs not): the output still has
  // the bytes those CRCs were computed on, which proves it without reading the input's
  // data (a value comparison would read it and fail).
  std::string bytes = tfckpt::testing::ReadFile(dir / "in.data-00000-of-00001");
  bytes[20] ^= 1;
  tfckpt::testing::WriteFile(dir / "in.data-00000-of-00001", bytes);
  auto changed = Open(dir / "in");
  CHECK(tfckpt::VerifyWritten(out, {{changed.get(), w->sources}}, st).ok());
  // A byte changed in the output is found (then compared by value, and named).
  bytes[20] ^= 1;
  tfckpt::testing::WriteFile(dir / "in.data-00000-of-00001", bytes);  // the input as it was
  std::string o = tfckpt::testing::ReadFile(out);
  o[o.size() - 3] ^= 1;
  tfckpt::testing::WriteFile(out, o);
  CheckMismatch(tfckpt::VerifyWritten(out, {{in.get(), w->sources}}, st), w->files, "t", "differ");
}
