// .npz archives read through libzip (npz_reader.h).
#include "npz_reader.h"

#include <zip.h>

#include <algorithm>
#include <mutex>

#include "npy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"
#include "core/tensor_encoding.h"

namespace tfckpt {
namespace {

absl::Status ZipError(const std::string& path, std::string_view what, zip_t* za) {
  return DataLossAt("npz.member", path, "", -1, StrCat(what, ": ", zip_strerror(za)));
}

// Members are read through libzip in windows of this size: verification and ranged reads
// never hold a whole member (a tensor may be larger than memory should allow).
constexpr size_t kWindow = 1 << 20;

// An open member (libzip file); closed when it goes.
struct MemberFile {
  zip_file_t* f = nullptr;
  ~MemberFile() {
    if (f != nullptr) zip_fclose(f);
  }
};

absl::Status MemberError(const std::string& path, const std::string& key, const char* name, zip_file_t* f) {
  return DataLossAt("npz.member", path, key, -1, StrCat(name, ": cannot read: ", zip_file_strerror(f)));
}

// Opens member `index`; its size into *size.
absl::Status OpenMember(zip_t* za, const std::string& path, zip_uint64_t index, MemberFile* m, zip_stat_t* st) {
  if (zip_stat_index(za, index, 0, st) != 0 || !(st->valid & ZIP_STAT_SIZE)) return ZipError(path, "stat", za);
  m->f = zip_fopen_index(za, index, 0);
  if (m->f == nullptr) return ZipError(path, st->name, za);
  return absl::OkStatus();
}

// Reads exactly `n` bytes of the open member into `out`.
absl::Status ReadExactly(MemberFile& m, const std::string& path, const std::string& key, const char* name, char* out,
                         uint64_t n) {
  while (n > 0) {
    const zip_int64_t got = zip_fread(m.f, out, std::min<uint64_t>(n, kWindow));
    if (got <= 0) return MemberError(path, key, name, m.f);
    out += got;
    n -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Reads and drops the next `n` bytes of the open member, in windows through `buffer`
// (libzip checks the CRC of what was read once the end is reached).
absl::Status ReadThrough(MemberFile& m, const std::string& path, const std::string& key, const char* name,
                         uint64_t n, std::string* buffer) {
  buffer->resize(kWindow);
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, kWindow);
    TFCKPT_RETURN_IF_ERROR(ReadExactly(m, path, key, name, buffer->data(), k));
    n -= k;
  }
  return absl::OkStatus();
}

// Skips `n` bytes of the open member: a seek where libzip can (stored members), else read.
absl::Status Skip(MemberFile& m, const std::string& path, const std::string& key, const char* name, uint64_t n,
                  std::string* buffer) {
  if (n == 0 || zip_fseek(m.f, static_cast<zip_int64_t>(n), SEEK_SET) == 0) return absl::OkStatus();
  return ReadThrough(m, path, key, name, n, buffer);
}

// Reads member `index`, the tensor `key`, whole (libzip checks its CRC-32 at the end).
// Only for strings, which are decoded whole; members of fixed-size dtypes are read in
// windows (ReadRange, VerifyCrc).
absl::StatusOr<std::string> ReadMember(zip_t* za, const std::string& path, zip_uint64_t index, const std::string& key) {
  MemberFile m;
  zip_stat_t st;
  TFCKPT_RETURN_IF_ERROR(OpenMember(za, path, index, &m, &st));
  std::string out(static_cast<size_t>(st.size), '\0');
  TFCKPT_RETURN_IF_ERROR(ReadExactly(m, path, key, st.name, out.data(), out.size()));
  // One more read reaches the end, where libzip compares the CRC.
  char extra;
  if (zip_fread(m.f, &extra, 1) != 0) return MemberError(path, key, st.name, m.f);
  return out;
}

class NpzPieceReader : public PieceReader {
 public:
  NpzPieceReader(std::string path, zip_t* za) : path_(std::move(path)), za_(za) {}
  ~NpzPieceReader() override { zip_discard(za_); }

  // The member (StoredData::shard) whole; the payload starts at StoredData::offset.
  // Strings are re-encoded in TensorFlow's layout without their NUL padding.
  absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool) const override {
    std::string member;
    {
      std::lock_guard<std::mutex> lock(mu_);
      TFCKPT_ASSIGN_OR_RETURN(member, ReadMember(za_, path_, static_cast<zip_uint64_t>(s.data.shard), t.name));
    }
    auto owned = std::make_shared<std::string>();
    if (t.dtype == static_cast<int32_t>(DType::kString)) {
      const int64_t n = NumElements(t.shape).value_or(0);
      const size_t width = n > 0 ? (member.size() - s.data.offset) / static_cast<size_t>(n) : 0;
      std::vector<std::string_view> elements;
      for (int64_t i = 0; i < n; ++i) {
        std::string_view e(member.data() + s.data.offset + i * width, width);
        while (!e.empty() && e.back() == '\0') e.remove_suffix(1);
        elements.push_back(e);
      }
      EncodeStrings(elements, owned.get());
    } else {
      *owned = std::move(member);
      owned->erase(0, static_cast<size_t>(s.data.offset));
    }
    return TensorBytes{*owned, owned};
  }

  // Streams the member through libzip, which checks its CRC-32 at the end. Strings are
  // read whole (Read).
  absl::Status VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const override {
    if (t.dtype == static_cast<int32_t>(DType::kString)) return PieceReader::VerifyCrc(t, s, buffer);
    std::lock_guard<std::mutex> lock(mu_);
    MemberFile m;
    zip_stat_t st;
    TFCKPT_RETURN_IF_ERROR(OpenMember(za_, path_, static_cast<zip_uint64_t>(s.data.shard), &m, &st));
    // Read, not seek: libzip checks the CRC of what it read.
    TFCKPT_RETURN_IF_ERROR(ReadThrough(m, path_, t.name, st.name, st.size, buffer));
    char extra;
    if (zip_fread(m.f, &extra, 1) != 0) return MemberError(path_, t.name, st.name, m.f);
    return absl::OkStatus();
  }

  // Bytes [begin, end) of the payload, read into `buffer` (not CRC-checked; see VerifyCrc).
  absl::StatusOr<std::string_view> ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end,
                                             std::string* buffer, TensorBytes* owner) const override {
    if (t.dtype == static_cast<int32_t>(DType::kString)) return PieceReader::ReadRange(t, s, begin, end, buffer, owner);
    std::lock_guard<std::mutex> lock(mu_);
    MemberFile m;
    zip_stat_t st;
    TFCKPT_RETURN_IF_ERROR(OpenMember(za_, path_, static_cast<zip_uint64_t>(s.data.shard), &m, &st));
    if (s.data.offset + end > st.size) {
      return DataLossAt("npz.member", path_, t.name, -1, StrCat(st.name, ": shorter than its .npy header says"));
    }
    TFCKPT_RETURN_IF_ERROR(Skip(m, path_, t.name, st.name, s.data.offset + begin, buffer));
    buffer->resize(static_cast<size_t>(end - begin));
    TFCKPT_RETURN_IF_ERROR(ReadExactly(m, path_, t.name, st.name, buffer->data(), end - begin));
    return std::string_view(*buffer);
  }

 private:
  std::string path_;
  zip_t* za_;
  mutable std::mutex mu_;
};

// The tensor member `index` holds, from its .npy header.
absl::StatusOr<TensorEntry> Member(zip_t* za, const std::string& path, zip_uint64_t index) {
  zip_stat_t st;
  if (zip_stat_index(za, index, 0, &st) != 0) return ZipError(path, "stat", za);
  TensorEntry t;
  t.name = st.name;
  if (t.name.size() > 4 && t.name.substr(t.name.size() - 4) == ".npy") t.name.resize(t.name.size() - 4);
  zip_file_t* f = zip_fopen_index(za, index, 0);
  if (f == nullptr) return ZipError(path, st.name, za);
  std::string head(static_cast<size_t>(std::min<zip_uint64_t>(st.size, 12 + 65536)), '\0');
  const zip_int64_t n = zip_fread(f, head.data(), head.size());
  zip_fclose(f);
  if (n < 0) return DataLossAt("npz.member", path, st.name, -1, "cannot read its .npy header");
  head.resize(static_cast<size_t>(n));
  auto h = ParseNpyHeader(head);
  if (!h.ok()) return DataLossAt("npz.member", path, st.name, -1, SV(h.status().message()));
  t.shape = h->shape;
  const std::optional<int32_t> dtype = DTypeOfNpyDescr(h->descr);
  t.dtype = dtype.value_or(0);
  const int64_t elements = NumElements(t.shape).value_or(-1);
  const uint64_t payload = st.size - std::min<uint64_t>(st.size, h->size);
  const DTypeInfo* info = dtype ? LookupDType(*dtype) : nullptr;
  t.bytes = payload;
  t.slices.push_back({Region::Full(t.shape), {}, st.name, StoredData{static_cast<int32_t>(index), h->size, payload}});
  if (!dtype || info == nullptr) {
    t.defect = StrCat("NumPy dtype ", h->descr, " has no TensorFlow dtype here");
  } else if (h->fortran_order && t.shape.size() > 1) {
    t.defect = "stored in Fortran order";
  } else if (info->element_size > 0 && (elements < 0 || payload != static_cast<uint64_t>(elements) * info->element_size)) {
    t.defect = StrCat("member holds ", payload, " data bytes; ", h->descr, " ", ShapeString(t.shape), " needs ",
                      elements * info->element_size);
  }
  if (!t.defect.empty()) t.defect_check = "npz.member";
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenNpz(const std::string& path) {
  int err = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (za == nullptr) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, err);
    absl::Status s = DataLossAt("npz.member", path, "", -1, StrCat("not a readable zip archive (", zip_error_strerror(&ze), ")"));
    zip_error_fini(&ze);
    return s;
  }
  auto reader = std::make_unique<NpzPieceReader>(path, za);  // owns za from here
  std::vector<TensorEntry> tensors;
  const zip_int64_t n = zip_get_num_entries(za, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    TFCKPT_ASSIGN_OR_RETURN(TensorEntry t, Member(za, path, static_cast<zip_uint64_t>(i)));
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  CheckpointInfo info;
  info.format = Format::kNpz;
  info.prefix = path;
  return std::make_unique<Checkpoint>(std::move(info), std::move(tensors), std::move(reader));
}

}  // namespace tfckpt
