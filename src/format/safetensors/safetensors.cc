// safetensors: strict header parsing, sharded-set indexes and the streaming writer (see
// safetensors.h for the layout). Opening a file or set as a Checkpoint is
// safetensors_reader.cc.
#include "format/safetensors/safetensors.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "base/coding.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {


namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
};
constexpr DTypeName kNames[] = {
    {"BOOL", DType::kBool},      {"U8", DType::kUInt8},        {"I8", DType::kInt8},
    {"I16", DType::kInt16},      {"U16", DType::kUInt16},      {"F16", DType::kHalf},
    {"BF16", DType::kBFloat16},  {"I32", DType::kInt32},       {"U32", DType::kUInt32},
    {"F32", DType::kFloat},      {"F64", DType::kDouble},      {"I64", DType::kInt64},
    {"U64", DType::kUInt64},     {"F8_E5M2", DType::kFloat8E5M2}, {"F8_E4M3", DType::kFloat8E4M3FN},
    {"C64", DType::kComplex64},
};

absl::Status Bad(const std::string& file, std::string_view key, std::string_view what) {
  return DataLossAt("safetensors.header", file, key, -1, what);
}

// Parses JSON, rejecting duplicate keys in any object (nlohmann keeps the last one).
absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text, const std::string& file) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::object_start) {
      keys.resize(static_cast<size_t>(depth) + 1);
      keys[depth].clear();
    }
    if (event == nlohmann::json::parse_event_t::key && duplicate.empty() && depth >= 1 &&
        static_cast<size_t>(depth - 1) < keys.size()) {
      const std::string k = parsed.get<std::string>();
      if (!keys[depth - 1].insert(k).second) duplicate = k;
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(file, "", "header is not valid JSON");
  if (!duplicate.empty()) return Bad(file, duplicate, "key appears twice in the header");
  return j;
}

}  // namespace

std::optional<int32_t> SafetensorsDType(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.name == name) return static_cast<int32_t>(n.dtype);
  }
  return std::nullopt;
}

std::optional<std::string_view> SafetensorsDTypeName(int32_t dtype) {
  for (const auto& n : kNames) {
    if (static_cast<int32_t>(n.dtype) == dtype) return n.name;
  }
  return std::nullopt;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view header, uint64_t data_size,
                                                         const std::string& file) {
  TFCKPT_ASSIGN_OR_RETURN(nlohmann::json j, ParseStrictJson(header, file));
  if (!j.is_object()) return Bad(file, "", "header is not a JSON object");
  SafetensorsHeader h;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Bad(file, name, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return Bad(file, m.key(), "__metadata__ values must be strings");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return Bad(file, name, "tensor entry is not an object");
    for (auto f = v.begin(); f != v.end(); ++f) {
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") {
        return Bad(file, name, StrCat("unknown field \"", f.key(), "\""));
      }
    }
    if (!v.contains("dtype") || !v["dtype"].is_string()) return Bad(file, name, "dtype missing or not a string");
    if (!v.contains("shape") || !v["shape"].is_array()) return Bad(file, name, "shape missing or not an array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      return Bad(file, name, "data_offsets must be [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    const std::string dtype = v["dtype"].get<std::string>();
    auto d = SafetensorsDType(dtype);
    if (!d) return Bad(file, name, StrCat("unknown dtype \"", dtype, "\""));
    t.dtype = *d;
    for (const auto& dim : v["shape"]) {
      if (!dim.is_number_unsigned()) return Bad(file, name, "shape dims must be non-negative integers");
      const uint64_t x = dim.get<uint64_t>();
      if (x > static_cast<uint64_t>(INT64_MAX)) return Bad(file, name, "shape dim too large");
      t.shape.push_back(static_cast<int64_t>(x));
    }
    for (const auto& o : v["data_offsets"]) {
      if (!o.is_number_unsigned()) return Bad(file, name, "data_offsets must be non-negative integers");
    }
    t.begin = v["data_offsets"][0].get<uint64_t>();
    t.end = v["data_offsets"][1].get<uint64_t>();
    if (t.end < t.begin) return Bad(file, name, "data_offsets end before they begin");
    auto n = NumElements(t.shape);
    if (!n.ok()) return Bad(file, name, "shape has too many elements");
    const int esize = LookupDType(t.dtype)->element_size;
    if (static_cast<uint64_t>(*n) > UINT64_MAX / static_cast<uint64_t>(esize) ||
        static_cast<uint64_t>(*n) * static_cast<uint64_t>(esize) != t.end - t.begin) {
      return Bad(file, name, StrCat("size ", t.end - t.begin, " does not match ", dtype, " ", ShapeString(t.shape)));
    }
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin > data_size || t.end > data_size) {
      return Bad(file, t.name, StrCat("data_offsets [", t.begin, ", ", t.end, "] run past the end of the data (",
                                      data_size, " bytes)"));
    }
    if (t.begin < at) return Bad(file, t.name, StrCat("data overlaps the previous tensor's (begins at ", t.begin, ")"));
    if (t.begin > at) return Bad(file, t.name, StrCat("hole in the data before this tensor (bytes ", at, " to ", t.begin, ")"));
    at = t.end;
  }
  if (at != data_size) return Bad(file, "", StrCat("data has ", data_size - at, " bytes no tensor uses at the end"));
  return h;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(auto file, Location::Of(path).OpenForRead());
  const uint64_t size = file->size();
  if (size < 8) return DataLossAt("safetensors.header", path, "", 0, "file is shorter than the 8-byte header length");
  // Only the header is read (an object store would otherwise fetch a read-ahead window of
  // tensor bytes with it, which the reader of the tensors fetches again).
  file->AdviseLayout({{0, 8}});
  char len_bytes[8];
  TFCKPT_RETURN_IF_ERROR(file->ReadAt(0, 8, len_bytes));
  const uint64_t n = DecodeFixed64(len_bytes);
  if (n > kSafetensorsMaxHeader) {
    return DataLossAt("safetensors.header", path, "", 0, StrCat("header length ", n, " exceeds the 100 MB limit"));
  }
  if (n > size - 8) {
    return DataLossAt("safetensors.header", path, "", 0,
                      StrCat("header length ", n, " runs past the end of the file (", size, " bytes)"));
  }
  std::string header(static_cast<size_t>(n), '\0');
  file->AdviseLayout({{0, 8}, {8, n}});
  TFCKPT_RETURN_IF_ERROR(file->ReadAt(8, header.size(), header.data()));
  TFCKPT_ASSIGN_OR_RETURN(SafetensorsHeader h, ParseSafetensorsHeader(header, size - 8 - n, path));
  h.data_start = 8 + n;
  return h;
}

absl::StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(auto file, Location::Of(path).OpenForRead());
  const uint64_t size = file->size();
  if (size > kSafetensorsMaxHeader) return DataLossAt("safetensors.index", path, "", -1, "index file is too large");
  std::string read;
  TFCKPT_ASSIGN_OR_RETURN(std::string_view text, file->Range(0, size, &read));
  auto j = ParseStrictJson(text, path);
  if (!j.ok()) return DataLossAt("safetensors.index", path, "", -1, ErrorInfoOf(j.status()).what);
  if (!j->is_object() || !j->contains("weight_map") || !(*j)["weight_map"].is_object()) {
    return DataLossAt("safetensors.index", path, "", -1, "no \"weight_map\" object");
  }
  SafetensorsIndex idx;
  for (auto it = (*j)["weight_map"].begin(); it != (*j)["weight_map"].end(); ++it) {
    if (!it.value().is_string()) return DataLossAt("safetensors.index", path, it.key(), -1, "file name is not a string");
    const std::string f = it.value().get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      return DataLossAt("safetensors.index", path, it.key(), -1, StrCat("file \"", f, "\" is not a plain file name"));
    }
    idx.weight_map[it.key()] = f;
  }
  if (j->contains("metadata") && (*j)["metadata"].is_object()) {
    for (auto it = (*j)["metadata"].begin(); it != (*j)["metadata"].end(); ++it) {
      idx.metadata[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    }
  }
  return idx;
}

uint64_t SafetensorsWriter::EntryBytes(const Entry& e) {
  return static_cast<uint64_t>(NumElements(e.shape).value_or(0)) *
         static_cast<uint64_t>(LookupDType(e.dtype)->element_size);
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const Location& at, const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata,
    bool header_later) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  for (const Entry& e : entries) {
    auto name = SafetensorsDTypeName(e.dtype);
    if (!name) return absl::InvalidArgumentError(StrCat("\"", e.name, "\": dtype has no safetensors name"));
    const uint64_t bytes = EntryBytes(e);
    h[e.name] = {{"dtype", *name}, {"shape", e.shape}, {"data_offsets", {w->data_size_, w->data_size_ + bytes}}};
    w->offsets_.push_back(w->data_size_);
    w->data_size_ += bytes;
  }
  std::string json;
  try {
    json = h.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::json::exception&) {
    // The header is JSON, whose strings are UTF-8; TF tensor names are any bytes.
    for (const Entry& e : entries) {
      try {
        (void)nlohmann::ordered_json(e.name).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
      } catch (const nlohmann::json::exception&) {
        return absl::InvalidArgumentError(StrCat("\"", PrintableKey(e.name),
                                                 "\": the name is not UTF-8, which a safetensors header (JSON) "
                                                 "cannot hold; give it another with --rename"));
      }
    }
    return absl::InvalidArgumentError("the safetensors metadata is not UTF-8");
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-aligned
  TFCKPT_ASSIGN_OR_RETURN(w->out_, at.store().Create(at.path()));
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((static_cast<uint64_t>(json.size()) >> (8 * i)) & 0xff);
  w->header_ = std::string(len, 8) + json;
  w->header_end_ = w->header_.size();
  w->cursor_ = w->header_end_;
  if (!header_later) TFCKPT_RETURN_IF_ERROR(w->WriteHeader());
  return w;
}

absl::Status SafetensorsWriter::WriteHeader() {
  // Positional from the start (storage.h: a file is written either way, never both).
  TFCKPT_RETURN_IF_ERROR(out_->WriteAt(0, header_));
  header_.clear();
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Append(std::string_view bytes) {
  TFCKPT_RETURN_IF_ERROR(out_->WriteAt(cursor_, bytes));
  cursor_ += bytes.size();
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n) {
  TFCKPT_RETURN_IF_ERROR(out_->CopyAt(cursor_, src, src_offset, n));
  cursor_ += n;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (out_->size() != header_end_ + data_size_) {
    return absl::InternalError(StrCat("bug: ", out_->path(), ": ", out_->size() - std::min(out_->size(), header_end_),
                                      " of ", data_size_, " data bytes written"));
  }
  return out_->Close();
}

absl::Status SafetensorsWriter::Commit() { return out_->Commit(); }

}  // namespace tfckpt
