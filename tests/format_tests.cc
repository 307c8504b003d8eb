// Each format's opener (src/format/*/) reached through the one entry (open.h), and
// Checkpoint over a PieceReader: a generated checkpoint opens and reads back, a damaged
// one fails naming its file and byte offset.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "saved_tensor_slice.pb.h"
#include "piece_util.h"
#include "run/run.h"
#include "test_util.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"
#include "tfckpt/open.h"
#include "tfckpt/ordered_code.h"
#include "format/safetensors/safetensors.h"
#include "tfckpt/status.h"
#include "model/piece_reader.h"

using tfckpt::testing::ReadFile;
using tfckpt::testing::TempDir;
using tfckpt::testing::WriteFile;

namespace {

using tfckpt::testing::OnlyPiece;

constexpr int32_t kFloat = static_cast<int32_t>(tfckpt::DType::kFloat);

std::string Floats(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

// Flips every bit of byte `at` of `path`.
void Flip(const std::string& path, size_t at) {
  std::string bytes = ReadFile(path);
  REQUIRE(at < bytes.size());
  bytes[at] = static_cast<char>(~bytes[at]);
  WriteFile(path, bytes);
}

// A PieceReader that hands out "0123456789" and counts how often it was asked.
class CountingReader : public tfckpt::PieceReader {
 public:
  explicit CountingReader(int* calls) : calls_(calls) {}
  absl::StatusOr<tfckpt::TensorBytes> Read(const tfckpt::TensorEntry&, const tfckpt::StoredSlice&, bool) const override {
    ++*calls_;
    return tfckpt::TensorBytes{"0123456789", nullptr};
  }

 private:
  int* calls_;
};

}  // namespace

TEST_CASE("Checkpoint over a PieceReader: defects are refused before the reader, ranges come from whole reads") {
  int calls = 0;
  tfckpt::CheckpointInfo info;
  info.format = tfckpt::Format::kV1;
  info.prefix = "model.ckpt";
  std::vector<tfckpt::TensorEntry> tensors(2);
  tensors[0].name = "a";
  tensors[0].slices.emplace_back();
  tensors[1].name = "b";
  tensors[1].slices.emplace_back();
  tensors[1].defect = "slice 0 has no entry";
  tensors[1].defect_check = "slice.missing-entry";
  tfckpt::Checkpoint c(info, tensors, std::make_unique<CountingReader>(&calls));

  const tfckpt::TensorEntry& a = *c.Find("a");
  const tfckpt::TensorEntry& b = *c.Find("b");
  CHECK(c.Find("c") == nullptr);
  std::string buffer;
  tfckpt::TensorBytes owner;
  auto range = c.ReadRange(a, a.slices[0], 2, 5, &buffer, &owner);
  REQUIRE(range.ok());
  CHECK(*range == "234");
  auto again = c.ReadRange(a, a.slices[0], 7, 10, &buffer, &owner);  // from `owner`, not read again
  REQUIRE(again.ok());
  CHECK(*again == "789");
  CHECK(c.VerifyCrc(a, a.slices[0], &buffer).ok());
  CHECK(calls == 2);

  for (const absl::Status& s : {c.Read(b, b.slices[0]).status(), c.VerifyCrc(b, b.slices[0], &buffer),
                                c.ReadRange(b, b.slices[0], 0, 1, &buffer, &owner).status()}) {
    CHECK(absl::IsDataLoss(s));
    const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf(s);
    CHECK(e.check == "slice.missing-entry");
    CHECK(e.file == "model.ckpt");  // a V1 checkpoint has no index path
    CHECK(e.key == "b");
  }
  CHECK(calls == 2);
  CHECK(absl::IsOutOfRange(c.DataFile(0).status()));  // no data files
  CHECK(absl::IsFailedPrecondition(c.ForEachIndexEntry([](auto, auto, auto) { return absl::OkStatus(); })));
  CHECK(c.raw_header().empty());
}

TEST_CASE("V2 bundle opener: a written bundle opens and reads; a damaged index or data file names file and offset") {
  TempDir dir;
  const std::string prefix = dir / "model";
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("a", kFloat, {2}, Floats({1, 2})).ok());
    REQUIRE((*w)->Add("b", kFloat, {3}, Floats({3, 4, 5})).ok());
    REQUIRE((*w)->Finish().ok());
  }
  {
    auto c = tfckpt::OpenCheckpoint(prefix);
    REQUIRE(c.ok());
    CHECK((*c)->info().format == tfckpt::Format::kV2);
    CHECK((*c)->info().index_path == prefix + ".index");
    CHECK((*c)->info().data_files == std::vector<std::string>{tfckpt::DataFileName(prefix, 0, 1)});
    CHECK((*c)->DataFile(0).ok());
    CHECK(absl::IsOutOfRange((*c)->DataFile(1).status()));  // a shard the index does not list
    CHECK(absl::IsOutOfRange((*c)->DataFile(-1).status()));
    REQUIRE((*c)->tensors().size() == 2);
    CHECK(OnlyPiece(**c, "a") == Floats({1, 2}));
    CHECK(OnlyPiece(**c, "b") == Floats({3, 4, 5}));
    std::string header;
    tfckpt::MakeHeader(1).SerializeToString(&header);
    CHECK((*c)->raw_header() == header);
    int entries = 0;
    CHECK((*c)->ForEachIndexEntry([&](auto, auto, auto) { return ++entries, absl::OkStatus(); }).ok());
    CHECK(entries == 3);  // header, a, b
  }
  SUBCASE("damaged data file: the read names the data file and the entry's offset") {
    const std::string data = tfckpt::DataFileName(prefix, 0, 1);
    Flip(data, 9);  // inside "b" (bytes 8..19)
    auto c = tfckpt::OpenCheckpoint(prefix);
    REQUIRE(c.ok());
    const tfckpt::TensorEntry& b = *(*c)->Find("b");
    const absl::Status s = (*c)->Read(b, b.slices[0]).status();
    const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf(s);
    CHECK(e.check == "data.crc");
    CHECK(e.file == data);
    CHECK(e.key == "b");
    CHECK(e.offset == 8);
    std::string buffer;
    CHECK(tfckpt::ErrorInfoOf((*c)->VerifyCrc(b, b.slices[0], &buffer)).offset == 8);
  }
  SUBCASE("damaged index block: the open names the index and the block's offset") {
    Flip(prefix + ".index", 3);  // inside the first data block, at offset 0
    auto c = tfckpt::OpenCheckpoint(prefix);
    REQUIRE(!c.ok());
    CHECK(absl::IsDataLoss(c.status()));
    const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf(c.status());
    CHECK(e.file == prefix + ".index");
    CHECK(e.offset == 0);
    // validate's mode: the damage is a finding, the open goes on.
    std::vector<tfckpt::Finding> findings;
    auto lenient = tfckpt::OpenCheckpoint(prefix, &findings);
    REQUIRE(lenient.ok());
    REQUIRE(!findings.empty());
    CHECK(findings[0].file == prefix + ".index");
    CHECK(findings[0].offset == 0);
  }
}

namespace {

// Writes a one-file V1 checkpoint at `path` holding float tensor `name` = `values` (shape
// [values.size()], one slice covering it), as TensorFlow's V1 saver lays it out.
void WriteV1(const std::string& path, const std::string& name, const std::vector<float>& values) {
  tfckpt::pb::SavedTensorSlices meta;
  meta.mutable_meta()->mutable_versions()->set_producer(1);
  tfckpt::pb::SavedSliceMeta* m = meta.mutable_meta()->add_tensor();
  m->set_name(name);
  m->mutable_shape()->add_dim()->set_size(static_cast<int64_t>(values.size()));
  m->set_type(tfckpt::pb::DT_FLOAT);
  m->add_slice()->add_extent();  // the whole dimension
  tfckpt::pb::SavedTensorSlices data;
  data.mutable_data()->set_name(name);
  data.mutable_data()->mutable_slice()->add_extent();
  tfckpt::pb::TensorProto* p = data.mutable_data()->mutable_data();
  p->set_dtype(tfckpt::pb::DT_FLOAT);
  p->mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(values.size()));
  for (float v : values) p->add_float_val(v);
  const std::string key = tfckpt::EncodeSliceKey(name, tfckpt::ExtentsFromProto(m->slice(0)));

  auto out = tfckpt::Storage::Local().Create(path);
  REQUIRE(out.ok());
  {
    tfckpt::TableWriter w(out->get());
    REQUIRE(w.Add("", meta.SerializeAsString()).ok());
    REQUIRE(w.Add(key, data.SerializeAsString()).ok());
    REQUIRE(w.Finish().ok());
  }
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
}

}  // namespace

TEST_CASE("Checkpoint::ReadInto: ranges straight into the caller's buffer, the whole piece CRC-checked, a stop "
          "between chunks") {
  TempDir dir;
  const std::string prefix = dir / "model";
  std::vector<float> values(3 << 18);  // 3 MiB: three chunks
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("small", kFloat, {2}, Floats({1, 2})).ok());
    REQUIRE((*w)->Add("big", kFloat, {static_cast<int64_t>(values.size())}, Floats(values)).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  const tfckpt::TensorEntry& big = *(*c)->Find("big");
  const uint64_t size = values.size() * 4;
  std::string out(size, '\0');
  REQUIRE((*c)->ReadInto(big, big.slices[0], 0, size, out.data()).ok());
  CHECK(out == Floats(values));
  std::string part(8, '\0');
  REQUIRE((*c)->ReadInto(big, big.slices[0], 4 * 1000, 4 * 1002, part.data()).ok());
  CHECK(part == Floats({1000, 1001}));
  SUBCASE("a stop request of the current run ends the read at the next chunk") {
    std::stop_source stop;
    tfckpt::RunOptions o;
    o.stop = stop.get_token();
    int chunks = 0;
    o.at_point = [&](std::string_view point) {
      if (point == "read-chunk" && ++chunks == 2) stop.request_stop();
    };
    tfckpt::Run run(o);
    tfckpt::RunScope scope(&run);
    CHECK(absl::IsCancelled((*c)->ReadInto(big, big.slices[0], 0, size, out.data())));
    CHECK(chunks == 2);
    run.Keep();
  }
  SUBCASE("a damaged byte: the whole piece fails its CRC, a range of it is read as stored") {
    Flip(tfckpt::DataFileName(prefix, 0, 1), 8 + 4 * 5000);
    auto damaged = tfckpt::OpenCheckpoint(prefix);
    REQUIRE(damaged.ok());
    const tfckpt::TensorEntry& b = *(*damaged)->Find("big");
    const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf((*damaged)->ReadInto(b, b.slices[0], 0, size, out.data()));
    CHECK(e.check == "data.crc");
    CHECK(e.key == "big");
    CHECK((*damaged)->ReadInto(b, b.slices[0], 0, size, out.data(), /*verify=*/false).ok());
    CHECK((*damaged)->ReadInto(b, b.slices[0], 4 * 4999, 4 * 5001, part.data()).ok());  // (a range: no CRC)
  }
}

TEST_CASE("V1 opener: a written table opens and reads; a damaged one names the file and the block's offset") {
  TempDir dir;
  const std::string path = dir / "model.ckpt";
  WriteV1(path, "w", {1.5f, -2});
  {
    auto c = tfckpt::OpenCheckpoint(path);
    REQUIRE(c.ok());
    CHECK((*c)->info().format == tfckpt::Format::kV1);
    CHECK((*c)->info().v1_files == std::vector<std::string>{path});
    REQUIRE((*c)->tensors().size() == 1);
    CHECK((*c)->tensors()[0].shape == tfckpt::Shape{2});
    CHECK(OnlyPiece(**c, "w") == Floats({1.5f, -2}));
    std::string buffer;
    const tfckpt::TensorEntry& w = (*c)->tensors()[0];
    CHECK((*c)->VerifyCrc(w, w.slices[0], &buffer).ok());
  }
  Flip(path, 2);  // inside the first data block, at offset 0
  auto c = tfckpt::OpenCheckpoint(path);
  REQUIRE(!c.ok());
  CHECK(absl::IsDataLoss(c.status()));
  const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf(c.status());
  CHECK(e.file == path);
  CHECK(e.offset == 0);
}

TEST_CASE("safetensors opener: a written file opens and reads; a damaged header names the file and offset 0") {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  {
    auto w = tfckpt::SafetensorsWriter::Create(tfckpt::Location::Of(path), {{"x", kFloat, {3}}}, {});
    REQUIRE(w.ok());
    REQUIRE((*w)->Append(Floats({7, 8, 9})).ok());
    REQUIRE((*w)->Finish().ok());
    REQUIRE((*w)->Commit().ok());
  }
  {
    auto c = tfckpt::OpenCheckpoint(path);
    REQUIRE(c.ok());
    CHECK((*c)->info().format == tfckpt::Format::kSafetensors);
    CHECK((*c)->info().data_files == std::vector<std::string>{path});
    CHECK(OnlyPiece(**c, "x") == Floats({7, 8, 9}));
    std::string buffer;
    const tfckpt::TensorEntry& x = (*c)->tensors()[0];
    CHECK((*c)->VerifyCrc(x, x.slices[0], &buffer).ok());  // no checksums: bounds only
    CHECK(absl::IsFailedPrecondition((*c)->ForEachIndexEntry([](auto, auto, auto) { return absl::OkStatus(); })));
  }
  Flip(path, 7);  // the top byte of the header length
  auto c = tfckpt::OpenCheckpoint(path);
  REQUIRE(!c.ok());
  CHECK(absl::IsDataLoss(c.status()));
  const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf(c.status());
  CHECK(e.check == "safetensors.header");
  CHECK(e.file == path);
  CHECK(e.offset == 0);
}
