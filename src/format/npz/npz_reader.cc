// .npz archives read through libzip (npz_reader.h).
#include "npz_reader.h"

#include <zip.h>

#include <cerrno>

#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>

#include "npy.h"
#include "format/npz/stored_zip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"
#include "model/tensor_encoding.h"
#include "model/piece_reader.h"

namespace tfckpt {
namespace {

// The archive's bytes for libzip, read through the storage (storage.h): a read-only zip
// source over a ReadableFile, so that an archive on an object store is read with ranged
// GETs as a local one is with pread. libzip asks for the central directory, then for each
// member's bytes as zip_fread asks for them; every read goes straight into libzip's
// buffer, so nothing here holds more than the read at hand (never the whole archive).
class ArchiveSource {
 public:
  explicit ArchiveSource(std::unique_ptr<ReadableFile> file) : file_(std::move(file)) { zip_error_init(&error_); }
  ~ArchiveSource() { zip_error_fini(&error_); }
  ArchiveSource(const ArchiveSource&) = delete;
  ArchiveSource& operator=(const ArchiveSource&) = delete;

  // libzip's callback (zip_source_function_create); `state` is the ArchiveSource.
  static zip_int64_t Callback(void* state, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
    return static_cast<ArchiveSource*>(state)->Command(data, len, cmd);
  }

  const ReadableFile& file() const { return *file_; }
  ReadableFile& mutable_file() { return *file_; }

  // The storage's error behind libzip's last read error, which alone would only say
  // "Read error" (a refused request, a replaced object); OK when there was none. Cleared.
  absl::Status TakeReadError() { return std::exchange(read_error_, absl::OkStatus()); }

 private:
  zip_int64_t Command(void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
    switch (cmd) {
      case ZIP_SOURCE_OPEN:
        pos_ = 0;
        return 0;
      case ZIP_SOURCE_READ: return Read(static_cast<char*>(data), len);
      case ZIP_SOURCE_CLOSE: return 0;
      case ZIP_SOURCE_STAT: {
        zip_stat_t* st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &error_);
        if (st == nullptr) return -1;
        zip_stat_init(st);
        st->size = file_->size();
        st->valid |= ZIP_STAT_SIZE;
        return sizeof(zip_stat_t);
      }
      case ZIP_SOURCE_SEEK: {
        const zip_int64_t to = zip_source_seek_compute_offset(pos_, file_->size(), data, len, &error_);
        if (to < 0) return -1;
        pos_ = static_cast<uint64_t>(to);
        return 0;
      }
      case ZIP_SOURCE_TELL: return static_cast<zip_int64_t>(pos_);
      case ZIP_SOURCE_ERROR: return zip_error_to_data(&error_, data, len);
      // The archive's owner (NpzPieceReader, or OpenNpz until it exists) owns this object
      // and destroys it after the archive.
      case ZIP_SOURCE_FREE: return 0;
      case ZIP_SOURCE_SUPPORTS:
        // Seekable and read-only: libzip then reads members in place, never through a copy.
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                              ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
                                              ZIP_SOURCE_SUPPORTS, -1);
      default:
        zip_error_set(&error_, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
  }

  // Up to `len` bytes at the current position (fewer only at the end of the file).
  zip_int64_t Read(char* data, zip_uint64_t len) {
    const uint64_t n = std::min<uint64_t>(len, file_->size() - std::min(pos_, file_->size()));
    if (n == 0) return 0;
    if (absl::Status s = file_->ReadAt(pos_, n, data); !s.ok()) {
      read_error_ = std::move(s);
      zip_error_set(&error_, ZIP_ER_READ, EIO);
      return -1;
    }
    pos_ += n;
    return static_cast<zip_int64_t>(n);
  }

  std::unique_ptr<ReadableFile> file_;
  uint64_t pos_ = 0;
  zip_error_t error_;
  absl::Status read_error_;
};

// libzip's error, or, when a read failed, the storage's error behind it placed where
// libzip's would be (FILE, KEY, "WHAT: ...") with its own code and message: an object
// store that refused a request has not damaged the archive.
absl::Status Failed(ArchiveSource& source, absl::Status libzip_error, std::string_view path, std::string_view key,
                    std::string_view what) {
  absl::Status read = source.TakeReadError();
  return read.ok() ? libzip_error : Locate(read, "npz.member", path, key, -1, StrCat(what, ": "));
}

// An open archive: libzip's handle and the source it reads through (discarded first).
struct Archive {
  std::string path;
  std::unique_ptr<ArchiveSource> source;
  zip_t* za = nullptr;
  ~Archive() {
    if (za != nullptr) zip_discard(za);
  }
};

absl::Status ZipError(Archive& a, std::string_view what) {
  return Failed(*a.source, DataLossAt("npz.member", a.path, "", -1, StrCat(what, ": ", zip_strerror(a.za))), a.path, "",
                what);
}

// Members are read through libzip in windows of this size: verification and ranged reads
// never hold a whole member (a tensor may be larger than memory should allow).
constexpr size_t kWindow = 1 << 20;

// An open member (libzip file) of `archive`; closed when it goes.
struct MemberFile {
  Archive* archive = nullptr;
  zip_file_t* f = nullptr;
  ~MemberFile() {
    if (f != nullptr) zip_fclose(f);
  }
};

absl::Status MemberError(MemberFile& m, const std::string& key, const char* name) {
  const std::string what = StrCat(name, ": cannot read");
  return Failed(*m.archive->source,
                DataLossAt("npz.member", m.archive->path, key, -1, StrCat(what, ": ", zip_file_strerror(m.f))),
                m.archive->path, key, what);
}

// Opens member `index`; its size into *size.
absl::Status OpenMember(Archive& a, zip_uint64_t index, MemberFile* m, zip_stat_t* st) {
  if (zip_stat_index(a.za, index, 0, st) != 0 || !(st->valid & ZIP_STAT_SIZE)) return ZipError(a, "stat");
  m->archive = &a;
  m->f = zip_fopen_index(a.za, index, 0);
  if (m->f == nullptr) return ZipError(a, st->name);
  return absl::OkStatus();
}

// Reads exactly `n` bytes of the open member into `out`.
absl::Status ReadExactly(MemberFile& m, const std::string& key, const char* name, char* out, uint64_t n) {
  while (n > 0) {
    const zip_int64_t got = zip_fread(m.f, out, std::min<uint64_t>(n, kWindow));
    if (got <= 0) return MemberError(m, key, name);
    out += got;
    n -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Reads and drops the next `n` bytes of the open member, in windows through `buffer`
// (libzip checks the CRC of what was read once the end is reached).
absl::Status ReadThrough(MemberFile& m, const std::string& key, const char* name, uint64_t n, std::string* buffer) {
  buffer->resize(kWindow);
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, kWindow);
    TFCKPT_RETURN_IF_ERROR(ReadExactly(m, key, name, buffer->data(), k));
    n -= k;
  }
  return absl::OkStatus();
}

// Skips `n` bytes of the open member: a seek where libzip can (stored members), else read.
absl::Status Skip(MemberFile& m, const std::string& key, const char* name, uint64_t n, std::string* buffer) {
  if (n == 0 || zip_fseek(m.f, static_cast<zip_int64_t>(n), SEEK_SET) == 0) return absl::OkStatus();
  return ReadThrough(m, key, name, n, buffer);
}

// One more read after the last byte reaches the end, where libzip compares the CRC-32.
absl::Status ReadEnd(MemberFile& m, const std::string& key, const char* name) {
  char extra;
  if (zip_fread(m.f, &extra, 1) != 0) return MemberError(m, key, name);
  return absl::OkStatus();
}

// Reads member `index`, the tensor `key`, whole (libzip checks its CRC-32 at the end).
// Only for strings, which are decoded whole; members of fixed-size dtypes are read in
// windows (ReadRange, VerifyCrc).
absl::StatusOr<std::string> ReadMember(Archive& a, zip_uint64_t index, const std::string& key) {
  MemberFile m;
  zip_stat_t st;
  TFCKPT_RETURN_IF_ERROR(OpenMember(a, index, &m, &st));
  std::string out(static_cast<size_t>(st.size), '\0');
  TFCKPT_RETURN_IF_ERROR(ReadExactly(m, key, st.name, out.data(), out.size()));
  TFCKPT_RETURN_IF_ERROR(ReadEnd(m, key, st.name));
  return out;
}

// A stored (uncompressed, unencrypted) member as the central directory lists it, whose
// bytes are read in place with ReadableFile::ReadAt (pread, a ranged GET), from any thread,
// without libzip (which reads one member at a time, through its own buffers): 20x faster
// to verify a 4 GiB .npz on two threads (docs/PERFORMANCE.md, issue 26). libzip has no
// call that tells where a member's data begin, so the directory is read here
// (stored_zip.h) and must agree with libzip's on every name.
struct InPlace {
  bool ok = false;
  uint64_t start = 0, size = 0;  // the member's data in the archive
  uint32_t crc = 0;              // CRC-32 of its data, from the central directory
  std::string name;
};

std::vector<InPlace> InPlaceMembers(Archive& a, zip_int64_t n) {
  std::vector<InPlace> out(static_cast<size_t>(std::max<zip_int64_t>(n, 0)));
  const ReadableFile& file = a.source->file();
  auto dir = zip::ReadDirectory(file);
  if (!dir.ok() || dir->size() != out.size()) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    const zip::DirectoryMember& m = (*dir)[i];
    const char* name = zip_get_name(a.za, i, ZIP_FL_ENC_RAW);
    if (name == nullptr || m.name != name || m.method != zip::kMethodStored || (m.flags & 1) != 0 ||
        m.compressed_size != m.size) {
      continue;
    }
    auto start = zip::DataStart(file, m);
    if (!start.ok()) continue;
    out[i] = {true, *start, m.size, m.crc, m.name};
  }
  return out;
}

// The CRC-32 of a stored member's data fed as they are read: its .npy header (read here)
// and then the payload (PayloadCheck).
class MemberCrc : public PayloadCheck {
 public:
  MemberCrc(const ReadableFile& file, const std::string& key, const InPlace& m, uint64_t header, uint64_t payload)
      : file_(file), key_(key), m_(m), payload_(payload) {
    std::string bytes(static_cast<size_t>(header), '\0');
    read_ = file.ReadAt(m.start, header, bytes.data());
    crc_ = zip::Crc32(0, bytes.data(), bytes.size());
  }
  void Feed(std::string_view bytes) override {
    crc_ = zip::Crc32(crc_, bytes.data(), bytes.size());
    fed_ += bytes.size();
  }
  absl::Status Finish() override {
    TFCKPT_RETURN_IF_ERROR(read_);
    if (fed_ != payload_) return absl::InternalError(StrCat("bug: ", fed_, " bytes of \"", key_, "\" checked of ", payload_));
    return Check(file_, key_, m_, crc_);
  }

  // The error for member `m` whose data have CRC-32 `crc`; OK when that is the stored one.
  static absl::Status Check(const ReadableFile& file, const std::string& key, const InPlace& m, uint32_t crc) {
    if (crc == m.crc) return absl::OkStatus();
    return DataLossAt("npz.member", file.path(), key, static_cast<int64_t>(m.start),
                      StrCat(m.name, ": CRC-32 mismatch (stored ", absl::StrFormat("%08x", m.crc), ", computed ",
                             absl::StrFormat("%08x", crc), ")"));
  }

 private:
  const ReadableFile& file_;
  const std::string key_;
  const InPlace& m_;
  uint64_t payload_, fed_ = 0;
  uint32_t crc_ = 0;
  absl::Status read_;
};

class NpzPieceReader : public PieceReader {
 public:
  NpzPieceReader(std::unique_ptr<Archive> archive, std::vector<InPlace> in_place)
      : a_(std::move(archive)), in_place_(std::move(in_place)) {}

  std::unique_ptr<PayloadCheck> StartPayloadCheck(const TensorEntry& t, const StoredSlice& s) const override {
    const InPlace* m = Direct(t, s);
    if (m == nullptr || s.data.offset > m->size) return nullptr;
    return std::make_unique<MemberCrc>(a_->source->file(), t.name, *m, s.data.offset, m->size - s.data.offset);
  }

  // The member (StoredData::shard) whole; the payload starts at StoredData::offset.
  // Strings are re-encoded in TensorFlow's layout without their NUL padding.
  absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool) const override {
    std::string member;
    {
      std::lock_guard<std::mutex> lock(mu_);
      TFCKPT_ASSIGN_OR_RETURN(member, ReadMember(*a_, static_cast<zip_uint64_t>(s.data.shard), t.name));
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
    if (const InPlace* m = Direct(t, s)) {  // pread windows and ISA-L's CRC-32
      const ReadableFile& file = a_->source->file();
      uint32_t crc = 0;
      buffer->resize(kWindow);
      for (uint64_t at = 0; at < m->size;) {
        const uint64_t n = std::min<uint64_t>(kWindow, m->size - at);
        TFCKPT_RETURN_IF_ERROR(file.ReadAt(m->start + at, n, buffer->data()));
        crc = zip::Crc32(crc, buffer->data(), n);
        at += n;
      }
      return MemberCrc::Check(file, t.name, *m, crc);
    }
    std::lock_guard<std::mutex> lock(mu_);
    MemberFile m;
    zip_stat_t st;
    TFCKPT_RETURN_IF_ERROR(OpenMember(*a_, static_cast<zip_uint64_t>(s.data.shard), &m, &st));
    // Read, not seek: libzip checks the CRC of what it read.
    TFCKPT_RETURN_IF_ERROR(ReadThrough(m, t.name, st.name, st.size, buffer));
    return ReadEnd(m, t.name, st.name);
  }

  // Bytes [begin, end) of the payload, read into `buffer` (not CRC-checked; see VerifyCrc).
  absl::StatusOr<std::string_view> ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end,
                                             std::string* buffer, TensorBytes* owner) const override {
    if (t.dtype == static_cast<int32_t>(DType::kString)) return PieceReader::ReadRange(t, s, begin, end, buffer, owner);
    if (const InPlace* m = Direct(t, s)) {
      if (s.data.offset + end > m->size) {
        return DataLossAt("npz.member", a_->path, t.name, -1, StrCat(m->name, ": shorter than its .npy header says"));
      }
      buffer->resize(static_cast<size_t>(end - begin));
      TFCKPT_RETURN_IF_ERROR(a_->source->file().ReadAt(m->start + s.data.offset + begin, end - begin, buffer->data()));
      return std::string_view(*buffer);
    }
    std::lock_guard<std::mutex> lock(mu_);
    MemberFile m;
    zip_stat_t st;
    TFCKPT_RETURN_IF_ERROR(OpenMember(*a_, static_cast<zip_uint64_t>(s.data.shard), &m, &st));
    if (s.data.offset + end > st.size) {
      return DataLossAt("npz.member", a_->path, t.name, -1, StrCat(st.name, ": shorter than its .npy header says"));
    }
    TFCKPT_RETURN_IF_ERROR(Skip(m, t.name, st.name, s.data.offset + begin, buffer));
    buffer->resize(static_cast<size_t>(end - begin));
    TFCKPT_RETURN_IF_ERROR(ReadExactly(m, t.name, st.name, buffer->data(), end - begin));
    return std::string_view(*buffer);
  }

 private:
  // The member of piece `s` when it is read in place, else nullptr (through libzip).
  const InPlace* Direct(const TensorEntry& t, const StoredSlice& s) const {
    const auto i = static_cast<size_t>(s.data.shard);
    if (t.dtype == static_cast<int32_t>(DType::kString) || i >= in_place_.size() || !in_place_[i].ok) return nullptr;
    return &in_place_[i];
  }

  std::unique_ptr<Archive> a_;  // libzip and its source are used by one thread at a time
  const std::vector<InPlace> in_place_;  // by member index
  mutable std::mutex mu_;
};

// Bytes of a member read first for its .npy header (ours are 128 bytes; NumPy's 64 or 128).
constexpr size_t kFirstHeadBytes = 512;

// The tensor member `index` holds, from its .npy header.
absl::StatusOr<TensorEntry> Member(Archive& a, zip_uint64_t index) {
  zip_stat_t st;
  if (zip_stat_index(a.za, index, 0, &st) != 0) return ZipError(a, "stat");
  TensorEntry t;
  t.name = st.name;
  if (t.name.size() > 4 && t.name.substr(t.name.size() - 4) == ".npy") t.name.resize(t.name.size() - 4);
  MemberFile m;
  m.archive = &a;
  m.f = zip_fopen_index(a.za, index, 0);
  if (m.f == nullptr) return ZipError(a, st.name);
  // The preamble: its first bytes (most headers fit), then the rest its length asks for
  // (at most 12 + 65535 bytes in all), never more of the payload than that: on an object
  // store each read is a request of that many bytes.
  std::string head(static_cast<size_t>(std::min<zip_uint64_t>(st.size, kFirstHeadBytes)), '\0');
  zip_int64_t n = zip_fread(m.f, head.data(), head.size());
  if (n >= 12 && static_cast<size_t>(n) == head.size()) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(head.data());
    const uint64_t want = b[6] == 1 ? 10 + (b[8] | b[9] << 8) : 12 + (b[8] | b[9] << 8 | b[10] << 16 | uint64_t{b[11]} << 24);
    const uint64_t more = std::min<uint64_t>(std::min<uint64_t>(want, 12 + 65536), st.size) -
                          std::min<uint64_t>(std::min<uint64_t>(want, 12 + 65536), head.size());
    if (more > 0) {
      head.resize(head.size() + static_cast<size_t>(more));
      const zip_int64_t got = zip_fread(m.f, head.data() + n, static_cast<zip_uint64_t>(more));
      n = got < 0 ? got : n + got;
    }
  }
  if (n < 0) {
    return Failed(*a.source, DataLossAt("npz.member", a.path, st.name, -1, "cannot read its .npy header"),
                  a.path, st.name, "cannot read its .npy header");
  }
  head.resize(static_cast<size_t>(n));
  auto h = ParseNpyHeader(head);
  if (!h.ok()) return DataLossAt("npz.member", a.path, st.name, -1, SV(h.status().message()));
  t.shape = h->shape;
  const std::optional<int32_t> dtype = DTypeOfNpyDescr(h->descr);
  t.dtype = dtype.value_or(0);
  const int64_t elements = NumElements(t.shape).value_or(-1);
  const uint64_t payload = st.size - std::min<uint64_t>(st.size, h->size);
  const DTypeInfo* info = dtype ? LookupDType(*dtype) : nullptr;
  t.bytes = payload;
  t.slices.push_back({Region::Full(t.shape), {}, st.name, StoredData{static_cast<int32_t>(index), h->size, payload}});
  // Bytes per element: the dtype's, or a string's width (|S<n>).
  uint64_t width = info != nullptr ? static_cast<uint64_t>(info->element_size) : 0;
  if (dtype == static_cast<int32_t>(DType::kString) && !absl::SimpleAtoi(h->descr.substr(2), &width)) width = 0;
  if (!dtype || info == nullptr || width == 0) {
    t.defect = StrCat("NumPy dtype ", h->descr, " has no TensorFlow dtype here");
  } else if (h->fortran_order && t.shape.size() > 1) {
    t.defect = "stored in Fortran order";
  } else if (elements < 0 || payload % width != 0 || payload / width != static_cast<uint64_t>(elements)) {
    // (Compared by division: elements * width may not fit in 64 bits, and its wrapped value
    // could match the payload, letting a reader index past it.)
    t.defect = StrCat("member holds ", payload, " data bytes; ", h->descr, " ", ShapeString(t.shape), " needs ",
                      elements >= 0 && static_cast<uint64_t>(elements) <= UINT64_MAX / width
                          ? StrCat(static_cast<uint64_t>(elements) * width)
                          : std::string("more than 2^64"));
  }
  if (!t.defect.empty()) t.defect_check = "npz.member";
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenNpz(const std::string& path) {
  // Through the storage for every path, local or an object's URL (storage.h).
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, Location::Of(path).OpenForRead());
  auto archive = std::make_unique<Archive>();
  archive->path = path;
  // On an object store, no read-ahead while the archive is opened (s3_storage.h): libzip's
  // reads of the directory, the local headers and each member's .npy header are fetched
  // exactly as asked. (Through read-ahead windows they fetched the whole archive once
  // before its members were read again: a verification downloaded it 2.25 times.)
  file->AdviseLayout({});
  archive->source = std::make_unique<ArchiveSource>(std::move(file));
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_function_create(ArchiveSource::Callback, archive->source.get(), &ze);
  if (src != nullptr) {
    archive->za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (archive->za == nullptr) zip_source_free(src);  // (the archive owns it once open)
  }
  if (archive->za == nullptr) {
    absl::Status s = Failed(
        *archive->source,
        DataLossAt("npz.member", path, "", -1, StrCat("not a readable zip archive (", zip_error_strerror(&ze), ")")),
        path, "", "not a readable zip archive");
    zip_error_fini(&ze);
    return s;
  }
  zip_error_fini(&ze);
  std::vector<TensorEntry> tensors;
  const zip_int64_t n = zip_get_num_entries(archive->za, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    TFCKPT_ASSIGN_OR_RETURN(TensorEntry t, Member(*archive, static_cast<zip_uint64_t>(i)));
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  CheckpointInfo info;
  info.format = Format::kNpz;
  info.prefix = path;
  std::vector<InPlace> in_place = InPlaceMembers(*archive, n);
  // The members' data as the pieces the reads follow: small members are fetched with their
  // neighbours, each large one as it is read (every byte once).
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (const InPlace& m : in_place) {
    if (m.ok) pieces.emplace_back(m.start, m.size);
  }
  archive->source->mutable_file().AdviseLayout(pieces);
  auto reader = std::make_unique<NpzPieceReader>(std::move(archive), std::move(in_place));
  return std::make_unique<Checkpoint>(std::move(info), std::move(tensors), std::move(reader));
}

}  // namespace tfckpt
