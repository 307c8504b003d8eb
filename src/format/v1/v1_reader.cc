// V1 checkpoints (docs/FORMAT.md §h): one or more tables whose "" entry lists the tensors and
// their slices, and whose other entries hold each slice's values in a TensorProto.
#include "format/v1/v1_reader.h"

#include <map>
#include <mutex>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/strings/str_cat.h"
#include "saved_tensor_slice.pb.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_proto.h"
#include "format/bundle/bundle_reader.h"
#include "format/table/table.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"
#include "model/piece_reader.h"

namespace tfckpt {
namespace {

template <typename T, typename Field>
void AppendAs(const Field& values, std::string* out) {
  for (const auto& v : values) {
    T x = static_cast<T>(v);
    out->append(reinterpret_cast<const char*>(&x), sizeof x);
  }
}

// How many messages at `path` (field numbers, each a length-delimited field inside the one
// before) a serialized message holds, counted on the wire format without building messages;
// -1 when it does not parse. (SavedTensorSlices.meta.tensor.slice: the slices a table of
// contents lists, counted before millions of TensorSliceProtos are built.)
int64_t CountNested(std::string_view bytes, const int* path, int depth) {
  namespace wfl = google::protobuf::internal;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  int64_t n = 0;
  while (uint32_t tag = in.ReadTag()) {
    if (tag == wfl::WireFormatLite::MakeTag(path[0], wfl::WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
      uint32_t len = 0;
      if (!in.ReadVarint32(&len)) return -1;
      const size_t at = static_cast<size_t>(in.CurrentPosition());
      if (len > bytes.size() - at) return -1;
      if (depth == 1) {
        ++n;
      } else {
        const int64_t inner = CountNested(bytes.substr(at, len), path + 1, depth - 1);
        if (inner < 0) return -1;
        n += inner;
      }
      if (!in.Skip(static_cast<int>(len))) return -1;
      continue;
    }
    if (!wfl::WireFormatLite::SkipField(&in, tag)) return -1;
  }
  return in.ConsumedEntireMessage() || in.CurrentPosition() == static_cast<int>(bytes.size()) ? n : -1;
}

// The V2 payload of `n` elements of `dtype` held in a V1 TensorProto.
absl::StatusOr<std::string> PayloadFromTensorProto(int32_t dtype, const pb::TensorProto& p, int64_t n) {
  const DTypeInfo* info = LookupDType(dtype);
  if (info == nullptr) return absl::DataLossError(StrCat("unknown dtype ", dtype));
  std::string out;
  if (!p.tensor_content().empty()) {
    if (info->element_size == 0 || static_cast<int64_t>(p.tensor_content().size()) != n * info->element_size) {
      return absl::DataLossError("tensor_content size does not match the slice");
    }
    return p.tensor_content();
  }
  int64_t count = -1;
  switch (static_cast<DType>(dtype)) {
    case DType::kFloat:
      AppendAs<float>(p.float_val(), &out), count = p.float_val_size();
      break;
    case DType::kDouble:
      AppendAs<double>(p.double_val(), &out), count = p.double_val_size();
      break;
    case DType::kInt32:
    case DType::kQInt32:
      AppendAs<int32_t>(p.int_val(), &out), count = p.int_val_size();
      break;
    case DType::kInt16:
    case DType::kQInt16:
      AppendAs<int16_t>(p.int_val(), &out), count = p.int_val_size();
      break;
    case DType::kInt8:
    case DType::kQInt8:
      AppendAs<int8_t>(p.int_val(), &out), count = p.int_val_size();
      break;
    case DType::kUInt8:
    case DType::kQUInt8:
      AppendAs<uint8_t>(p.int_val(), &out), count = p.int_val_size();
      break;
    case DType::kUInt16:
    case DType::kQUInt16:
      AppendAs<uint16_t>(p.int_val(), &out), count = p.int_val_size();
      break;
    case DType::kInt64:
      AppendAs<int64_t>(p.int64_val(), &out), count = p.int64_val_size();
      break;
    case DType::kBool:
      AppendAs<uint8_t>(p.bool_val(), &out), count = p.bool_val_size();
      break;
    case DType::kHalf:
      AppendAs<uint16_t>(p.half_val(), &out), count = p.half_val_size();
      break;
    case DType::kUInt32:
      AppendAs<uint32_t>(p.uint32_val(), &out), count = p.uint32_val_size();
      break;
    case DType::kUInt64:
      AppendAs<uint64_t>(p.uint64_val(), &out), count = p.uint64_val_size();
      break;
    case DType::kComplex64:
      AppendAs<float>(p.scomplex_val(), &out), count = p.scomplex_val_size() / 2;
      break;
    case DType::kComplex128:
      AppendAs<double>(p.dcomplex_val(), &out), count = p.dcomplex_val_size() / 2;
      break;
    case DType::kString: {
      std::vector<std::string_view> elements(p.string_val().begin(), p.string_val().end());
      count = p.string_val_size();
      if (count == n) EncodeStrings(elements, &out);
      break;
    }
    default:
      return absl::DataLossError(StrCat(DTypeName(dtype), " cannot be stored in a V1 checkpoint"));
  }
  if (count != n) {
    return absl::DataLossError(StrCat("slice holds ", count, " values, its shape needs ", n));
  }
  return out;
}

// The slice map of V1 tables and their facts, as the loader builds them before the Checkpoint is constructed.
struct V1Loader {
  absl::Status LoadV1(const std::vector<std::string>& files, std::vector<Finding>* findings);

  CheckpointInfo info_;
  std::vector<TensorEntry> tensors_;  // sorted by name
  std::vector<std::unique_ptr<TableReader>> v1_tables_;
};

// Reads a slice by looking its key up in its table and decoding the TensorProto there.
class V1Reader : public PieceReader {
 public:
  V1Reader(std::vector<std::string> files, std::vector<std::unique_ptr<TableReader>> tables)
      : v1_files_(std::move(files)), v1_tables_(std::move(tables)) {}

  // V1 has no checksums: `verify` changes nothing.
  absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool verify) const override;

 private:
  std::vector<std::string> v1_files_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<TableReader>> v1_tables_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenV1(const std::string& pattern, std::vector<std::string> files,
                                                   std::vector<Finding>* findings) {
  V1Loader c;
  c.info_.format = Format::kV1;
  c.info_.prefix = pattern;
  c.info_.v1_files = files;
  TFCKPT_RETURN_IF_ERROR(c.LoadV1(files, findings));
  auto reader = std::make_unique<V1Reader>(std::move(files), std::move(c.v1_tables_));
  return std::make_unique<Checkpoint>(std::move(c.info_), std::move(c.tensors_), std::move(reader));
}

absl::Status V1Loader::LoadV1(const std::vector<std::string>& files, std::vector<Finding>* findings) {
  std::map<std::string, TensorEntry> by_name;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    TFCKPT_ASSIGN_OR_RETURN(auto table, TableReader::Open(files[fi]));
    info_.index_size += table->file_size();
    std::map<std::string, bool> keys;  // slice keys present in this file
    std::string meta_value;
    bool have_meta = false;
    TFCKPT_RETURN_IF_ERROR(VisitTable(*table, findings, [&](std::string_view key, std::string_view value, uint64_t) {
      if (key.empty()) {
        meta_value.assign(value);
        have_meta = true;
      } else {
        keys.emplace(std::string(key), true);
      }
      return absl::OkStatus();
    }));
    info_.index_has_snappy = info_.index_has_snappy || table->saw_snappy();
    if (!have_meta) return DataLossAt("v1.meta", files[fi], "", -1, "V1 checkpoint has no table of contents (empty key)");
    // As for a V2 metadata entry (TooManySlices): a table of contents listing far more
    // slices than the table holds is refused before its messages are built.
    static constexpr int kSlicePath[] = {1, 1, 4};  // SavedTensorSlices.meta.tensor.slice
    const int64_t listed = CountNested(meta_value, kSlicePath, 3);
    if (listed >= 0 && TooManySlices(listed, static_cast<int64_t>(keys.size()))) {
      return DataLossAt("entry.slices", files[fi], "", -1,
                        StrCat("table of contents lists ", listed, " slices but the table holds only ", keys.size(),
                               " slice entries"));
    }
    pb::SavedTensorSlices sts;
    if (!sts.ParseFromString(meta_value) || !sts.has_meta()) {
      return DataLossAt("v1.meta", files[fi], "", -1, "table of contents is not a SavedTensorSlices message");
    }
    TFCKPT_RETURN_IF_ERROR(Annotate(CheckVersion(sts.meta().versions()), files[fi]));
    for (const auto& m : sts.meta().tensor()) {
      auto shape = ShapeFromProto(m.shape());
      if (!shape.ok()) return DataLossAt("entry.shape", files[fi], m.name(), -1, SV(shape.status().message()));
      auto [it, inserted] = by_name.try_emplace(m.name());
      TensorEntry& t = it->second;
      if (inserted) {
        t.name = m.name();
        t.dtype = m.type();
        t.shape = *shape;
      } else if (t.dtype != m.type() || t.shape != *shape) {
        return DataLossAt("v1.meta", files[fi], m.name(), -1, "dtype or shape differs between V1 files");
      }
      for (const auto& sp : m.slice()) {
        StoredSlice s;
        s.extents = ExtentsFromProto(sp);
        auto region = RegionOf(s.extents, t.shape);
        if (!region.ok()) return DataLossAt("v1.meta", files[fi], m.name(), -1, SV(region.status().message()));
        s.region = *region;
        s.key = EncodeSliceKey(t.name, s.extents);
        s.data.v1_file = static_cast<int>(fi);
        if (!keys.count(s.key) && t.defect.empty()) {
          t.defect = StrCat("slice ", SliceString(s.region, t.shape), " has no entry in ", files[fi]);
          t.defect_check = "slice.missing-entry";
        }
        // Every value takes at least one byte of its table (a Snappy block at most 1/32 of
        // one): a slice claiming more elements than that is refused before a reader sizes
        // a buffer from its shape.
        if (t.defect.empty() && static_cast<uint64_t>(s.region.num_elements()) > table->file_size() * 32 + 64) {
          t.defect = StrCat("slice ", SliceString(s.region, t.shape), " claims ", s.region.num_elements(),
                            " values, more than the ", table->file_size(), " bytes of ", files[fi], " can hold");
          t.defect_check = "v1.slice";
        }
        t.slices.push_back(std::move(s));
      }
    }
    v1_tables_.push_back(std::move(table));
  }
  for (auto& [name, t] : by_name) {
    t.partitioned = !(t.slices.size() == 1 && t.slices[0].region.Covers(t.shape));
    const DTypeInfo* info = LookupDType(t.dtype);
    if (info == nullptr && t.defect.empty()) {
      t.defect = StrCat("unknown or unstorable dtype ", DTypeName(t.dtype));
      t.defect_check = "entry.dtype";
    }
    if (info != nullptr) {
      for (const auto& s : t.slices) t.bytes += static_cast<uint64_t>(s.region.num_elements()) * info->element_size;
    }
    tensors_.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorBytes> V1Reader::Read(const TensorEntry& t, const StoredSlice& s, bool) const {
  std::unique_ptr<TableReader>* table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table = &v1_tables_.at(s.data.v1_file);
  }
  const std::string& file = v1_files_[s.data.v1_file];
  std::optional<std::string> value;
  {
    std::lock_guard<std::mutex> lock(mu_);  // TableReader::Get is not thread-safe
    TFCKPT_ASSIGN_OR_RETURN(value, (*table)->Get(s.key));
  }
  if (!value) return DataLossAt("slice.missing-entry", file, t.name, -1, StrCat(PieceLabel(t, s), "slice entry missing"));
  pb::SavedTensorSlices sts;
  if (!sts.ParseFromString(*value) || !sts.has_data()) {
    return DataLossAt("v1.slice", file, t.name, -1,
                      StrCat(PieceLabel(t, s), "slice entry is not a SavedTensorSlices data message"));
  }
  auto payload = PayloadFromTensorProto(t.dtype, sts.data().data(), s.region.num_elements());
  if (!payload.ok()) return Locate(payload.status(), "v1.slice", file, t.name, -1, PieceLabel(t, s));
  auto buf = std::make_shared<std::string>(std::move(*payload));
  std::string_view view = *buf;
  return TensorBytes{view, std::move(buf)};
}

}  // namespace tfckpt
