// Stored-member zip archives (see stored_zip.h).
#include "format/npz/stored_zip.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include <algorithm>
#include <set>

#include "base/coding.h"
#include "base/vector_state.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::zip {
namespace {

constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr uint32_t kDirectorySignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kEnd64Signature = 0x06064b50;
constexpr uint32_t kLocator64Signature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kFlagUtf8 = 0x0800;            // general purpose bit 11: the name is UTF-8
constexpr uint16_t kVersion = 20, kVersion64 = 45;  // 2.0; 4.5 for zip64
constexpr uint16_t kMadeByUnix = 3 << 8;
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr uint32_t kUnixFile0644 = 0100644u << 16;
constexpr uint64_t kMax32 = 0xFFFFFFFFu;
constexpr uint64_t kMax16 = 0xFFFFu;
constexpr size_t kLocalHeaderSize = 30, kDirectoryEntrySize = 46, kEndSize = 22, kEnd64Size = 56, kLocator64Size = 20;

void Put16(std::string* out, uint64_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}
void Put32(std::string* out, uint64_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void Put64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint16_t Get16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8);
}

bool Ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
bool Utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 1, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3, cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

uint16_t Flags(std::string_view name) { return Ascii(name) ? 0 : kFlagUtf8; }

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t n) {
  crc = crc32_gzip_refl(crc, static_cast<const unsigned char*>(data), n);
  ClearUpperVectorState();
  return crc;
}

uint32_t Crc32Concat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return static_cast<uint32_t>(crc32_combine64(crc_a, crc_b, static_cast<z_off64_t>(len_b)));
}

std::string LocalHeader(std::string_view name, uint64_t size, uint32_t crc) {
  const bool zip64 = size >= kMax32;
  std::string h;
  Put32(&h, kLocalSignature);
  Put16(&h, zip64 ? kVersion64 : kVersion);
  Put16(&h, Flags(name));
  Put16(&h, kMethodStored);
  Put16(&h, 0);  // time 00:00:00
  Put16(&h, kDosDate1980);
  Put32(&h, crc);
  Put32(&h, zip64 ? kMax32 : size);  // compressed size
  Put32(&h, zip64 ? kMax32 : size);
  Put16(&h, name.size());
  Put16(&h, zip64 ? 20 : 0);
  h.append(name);
  if (zip64) {  // both sizes, as APPNOTE 4.5.3 asks of a local header
    Put16(&h, kZip64ExtraId);
    Put16(&h, 16);
    Put64(&h, size);
    Put64(&h, size);
  }
  return h;
}

std::string DirectoryEntry(std::string_view name, uint64_t size, uint32_t crc, uint64_t header_offset) {
  const bool big = size >= kMax32, far = header_offset >= kMax32;
  std::string extra;
  if (big || far) {
    std::string fields;
    if (big) Put64(&fields, size), Put64(&fields, size);  // uncompressed, compressed
    if (far) Put64(&fields, header_offset);
    Put16(&extra, kZip64ExtraId);
    Put16(&extra, fields.size());
    extra += fields;
  }
  // The version needed matches the local header's (libzip's consistency check compares them).
  const uint16_t needed = big ? kVersion64 : kVersion;
  std::string e;
  Put32(&e, kDirectorySignature);
  Put16(&e, kMadeByUnix | kVersion64);
  Put16(&e, needed);
  Put16(&e, Flags(name));
  Put16(&e, kMethodStored);
  Put16(&e, 0);
  Put16(&e, kDosDate1980);
  Put32(&e, crc);
  Put32(&e, big ? kMax32 : size);
  Put32(&e, big ? kMax32 : size);
  Put16(&e, name.size());
  Put16(&e, extra.size());
  Put16(&e, 0);  // comment
  Put16(&e, 0);  // disk
  Put16(&e, 0);  // internal attributes
  Put32(&e, kUnixFile0644);
  Put32(&e, far ? kMax32 : header_offset);
  e.append(name);
  e += extra;
  return e;
}

std::string EndRecords(uint64_t entries, uint64_t directory_offset, uint64_t directory_size) {
  const bool zip64 = entries >= kMax16 || directory_offset >= kMax32 || directory_size >= kMax32;
  std::string out;
  if (zip64) {
    const uint64_t end64 = directory_offset + directory_size;
    Put32(&out, kEnd64Signature);
    Put64(&out, kEnd64Size - 12);  // the size of the rest of the record
    Put16(&out, kMadeByUnix | kVersion64);
    Put16(&out, kVersion64);
    Put32(&out, 0);  // this disk
    Put32(&out, 0);  // the disk of the directory
    Put64(&out, entries);
    Put64(&out, entries);
    Put64(&out, directory_size);
    Put64(&out, directory_offset);
    Put32(&out, kLocator64Signature);
    Put32(&out, 0);
    Put64(&out, end64);
    Put32(&out, 1);  // disks
  }
  Put32(&out, kEndSignature);
  Put16(&out, 0);
  Put16(&out, 0);
  Put16(&out, zip64 ? kMax16 : entries);
  Put16(&out, zip64 ? kMax16 : entries);
  Put32(&out, zip64 ? kMax32 : directory_size);
  Put32(&out, zip64 ? kMax32 : directory_offset);
  Put16(&out, 0);  // comment
  return out;
}

absl::StatusOr<std::unique_ptr<StoredZipWriter>> StoredZipWriter::Create(const Location& file,
                                                                         std::vector<Member> members) {
  const std::string& path = file.path();
  std::unique_ptr<StoredZipWriter> w(new StoredZipWriter());
  std::set<std::string_view> names;
  uint64_t at = 0, directory = 0;
  for (Member& m : members) {
    if (m.name.empty() || m.name.size() > kMax16) {
      return absl::InvalidArgumentError(StrCat(path, ": member name of ", m.name.size(), " bytes (1 to 65535 fit)"));
    }
    if (!Utf8(m.name)) {
      return absl::InvalidArgumentError(StrCat("\"", PrintableKey(m.name),
                                               "\": the name is not UTF-8, which a zip member name must be; give "
                                               "it another with --rename"));
    }
    Entry e;
    e.header_offset = at;
    e.data_offset = at + LocalHeader(m.name, m.size, 0).size();
    at = e.data_offset + m.size;
    directory += DirectoryEntry(m.name, m.size, 0, e.header_offset).size();
    e.m = std::move(m);
    w->entries_.push_back(std::move(e));
  }
  for (const Entry& e : w->entries_) {
    if (!names.insert(e.m.name).second) {
      return absl::InvalidArgumentError(StrCat(path, ": member \"", PrintableKey(e.m.name), "\" given twice"));
    }
  }
  w->directory_offset_ = at;
  w->size_ = at + directory + EndRecords(w->entries_.size(), at, directory).size();
  TFCKPT_ASSIGN_OR_RETURN(w->out_, file.store().Create(path));
  return w;
}

absl::Status StoredZipWriter::SetCrc(size_t i, uint32_t crc) {
  Entry& e = entries_[i];
  e.crc = crc;
  e.crc_set = true;
  return out_->WriteAt(e.header_offset, LocalHeader(e.m.name, e.m.size, crc));
}

absl::Status StoredZipWriter::Finish() {
  std::string directory;
  for (const Entry& e : entries_) {
    if (!e.crc_set) return absl::InternalError(StrCat("bug: ", out_->path(), ": member \"", e.m.name, "\" has no CRC"));
    directory += DirectoryEntry(e.m.name, e.m.size, e.crc, e.header_offset);
  }
  directory += EndRecords(entries_.size(), directory_offset_,
                          directory.size());
  // (Written in steps: a directory of many members is large, and a stop check may come
  // between them.)
  constexpr size_t kStep = 8 << 20;
  for (size_t done = 0; done < directory.size(); done += kStep) {
    TFCKPT_RETURN_IF_ERROR(
        out_->WriteAt(directory_offset_ + done, std::string_view(directory).substr(done, kStep)));
  }
  if (out_->size() != size_) {
    return absl::InternalError(StrCat("bug: ", out_->path(), ": ", out_->size(), " bytes written of ", size_));
  }
  return out_->Close();
}

absl::Status StoredZipWriter::Commit() { return out_->Commit(); }

// ---------------------------------------------------------------------------------------
// Reading the central directory.

namespace {

absl::Status Bad(const ReadableFile& f, uint64_t offset, std::string_view what) {
  return DataLossAt("npz.member", f.path(), "", static_cast<int64_t>(offset), StrCat("zip: ", what));
}

// The zip64 fields of an extra-field block `extra` (id 0x0001), in APPNOTE's order, for
// the fixed fields that hold their "see zip64" value.
bool ReadZip64(std::string_view extra, bool size, bool compressed, bool offset, DirectoryMember* m) {
  while (extra.size() >= 4) {
    const uint16_t id = Get16(extra.data()), len = Get16(extra.data() + 2);
    if (extra.size() < 4u + len) return false;
    std::string_view body = extra.substr(4, len);
    extra.remove_prefix(4u + len);
    if (id != kZip64ExtraId) continue;
    auto take = [&](uint64_t* v) {
      if (body.size() < 8) return false;
      *v = DecodeFixed64(body.data());
      body.remove_prefix(8);
      return true;
    };
    if (size && !take(&m->size)) return false;
    if (compressed && !take(&m->compressed_size)) return false;
    if (offset && !take(&m->header_offset)) return false;
    return true;
  }
  return !size && !compressed && !offset;
}

}  // namespace

absl::StatusOr<std::vector<DirectoryMember>> ReadDirectory(const ReadableFile& file) {
  const uint64_t size = file.size();
  if (size < kEndSize) return Bad(file, 0, "shorter than an end of central directory record");
  // The end record is the last 22 bytes, unless a comment (up to 65535 bytes) follows it.
  const uint64_t tail_at = size - std::min<uint64_t>(size, kEndSize + kMax16);
  std::string tail(static_cast<size_t>(size - tail_at), '\0');
  TFCKPT_RETURN_IF_ERROR(file.ReadAt(tail_at, tail.size(), tail.data()));
  size_t end = std::string::npos;
  for (size_t i = tail.size() - kEndSize + 1; i-- > 0;) {
    if (DecodeFixed32(tail.data() + i) == kEndSignature && i + kEndSize + Get16(tail.data() + i + 20) == tail.size()) {
      end = i;
      break;
    }
  }
  if (end == std::string::npos) return Bad(file, size, "no end of central directory record");
  const char* e = tail.data() + end;
  uint64_t entries = Get16(e + 10), dir_size = DecodeFixed32(e + 12), dir_offset = DecodeFixed32(e + 16);
  const uint64_t end_at = tail_at + end;
  if (entries == kMax16 || dir_size == kMax32 || dir_offset == kMax32) {
    if (end_at < kLocator64Size) return Bad(file, end_at, "zip64 locator missing");
    char loc[kLocator64Size];
    TFCKPT_RETURN_IF_ERROR(file.ReadAt(end_at - kLocator64Size, kLocator64Size, loc));
    if (DecodeFixed32(loc) != kLocator64Signature) return Bad(file, end_at - kLocator64Size, "zip64 locator missing");
    const uint64_t end64 = DecodeFixed64(loc + 8);
    if (end64 > size || size - end64 < kEnd64Size) return Bad(file, end_at - kLocator64Size, "zip64 end record past the end");
    char rec[kEnd64Size];
    TFCKPT_RETURN_IF_ERROR(file.ReadAt(end64, kEnd64Size, rec));
    if (DecodeFixed32(rec) != kEnd64Signature) return Bad(file, end64, "zip64 end record missing");
    entries = DecodeFixed64(rec + 32);
    dir_size = DecodeFixed64(rec + 40);
    dir_offset = DecodeFixed64(rec + 48);
  }
  if (dir_offset > size || dir_size > size - dir_offset || entries > dir_size / kDirectoryEntrySize) {
    return Bad(file, end_at, "central directory runs past the end of the file");
  }
  std::string dir(static_cast<size_t>(dir_size), '\0');
  TFCKPT_RETURN_IF_ERROR(file.ReadAt(dir_offset, dir.size(), dir.data()));
  std::vector<DirectoryMember> out;
  out.reserve(static_cast<size_t>(entries));
  size_t at = 0;
  for (uint64_t k = 0; k < entries; ++k) {
    const uint64_t where = dir_offset + at;
    if (dir.size() - at < kDirectoryEntrySize || DecodeFixed32(dir.data() + at) != kDirectorySignature) {
      return Bad(file, where, "bad central directory entry");
    }
    const char* p = dir.data() + at;
    const size_t name_len = Get16(p + 28), extra_len = Get16(p + 30), comment_len = Get16(p + 32);
    if (dir.size() - at - kDirectoryEntrySize < name_len + extra_len + comment_len) {
      return Bad(file, where, "central directory entry runs past the directory");
    }
    DirectoryMember m;
    m.flags = Get16(p + 8);
    m.method = Get16(p + 10);
    m.crc = DecodeFixed32(p + 16);
    m.compressed_size = DecodeFixed32(p + 20);
    m.size = DecodeFixed32(p + 24);
    m.header_offset = DecodeFixed32(p + 42);
    m.name.assign(p + kDirectoryEntrySize, name_len);
    const std::string_view extra(p + kDirectoryEntrySize + name_len, extra_len);
    if (!ReadZip64(extra, m.size == kMax32, m.compressed_size == kMax32, m.header_offset == kMax32, &m)) {
      return Bad(file, where, "zip64 extra field missing or short");
    }
    out.push_back(std::move(m));
    at += kDirectoryEntrySize + name_len + extra_len + comment_len;
  }
  return out;
}

absl::StatusOr<uint64_t> DataStart(const ReadableFile& file, const DirectoryMember& m) {
  char h[kLocalHeaderSize];
  if (m.header_offset > file.size() || file.size() - m.header_offset < kLocalHeaderSize) {
    return Bad(file, m.header_offset, StrCat("local header of \"", m.name, "\" past the end of the file"));
  }
  TFCKPT_RETURN_IF_ERROR(file.ReadAt(m.header_offset, kLocalHeaderSize, h));
  if (DecodeFixed32(h) != kLocalSignature) {
    return Bad(file, m.header_offset, StrCat("no local header of \"", m.name, "\" where the directory says"));
  }
  const uint64_t start = m.header_offset + kLocalHeaderSize + Get16(h + 26) + Get16(h + 28);
  if (start > file.size() || file.size() - start < m.compressed_size) {
    return Bad(file, m.header_offset, StrCat("data of \"", m.name, "\" run past the end of the file"));
  }
  return start;
}

}  // namespace tfckpt::zip
