// Reader for TensorFlow/LevelDB tables (docs/FORMAT.md §a). Every size read from the file is
// checked against the file before it is used; every error names the file and offset.
#include <snappy.h>

#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "format/table/table.h"
#include "tfckpt/status.h"

namespace tfckpt {
namespace {

bool DecodeHandle(std::string_view* src, BlockHandle* h) {
  return GetVarint64(src, &h->offset) && GetVarint64(src, &h->size);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TableReader>> TableReader::Open(const std::string& path, const FileOpener* opener) {
  TFCKPT_ASSIGN_OR_RETURN(auto file, OpenFile(path, opener));
  std::unique_ptr<TableReader> t(new TableReader(std::move(file)));
  const uint64_t size = t->file_->size();
  TFCKPT_ASSIGN_OR_RETURN(t->all_, t->file_->Range(0, size, &t->read_));
  if (size < kFooterSize) {
    return DataLossAt("table.footer", path, "", -1, StrCat("file is ", size, " bytes, too short for a table footer (48)"));
  }
  const uint64_t footer_at = size - kFooterSize;
  std::string_view footer = t->all_.substr(footer_at);
  if (DecodeFixed64(footer.data() + 40) != kTableMagic) {
    return DataLossAt("table.footer", path, "", footer_at + 40, "bad table magic number (not a TensorFlow index or V1 file)");
  }
  std::string_view handles = footer.substr(0, 40);
  BlockHandle meta, index;
  if (!DecodeHandle(&handles, &meta) || !DecodeHandle(&handles, &index)) {
    return DataLossAt("table.footer", path, "", footer_at, "malformed block handles in table footer");
  }
  // LevelDB writes the shortest varints and pads with zero bytes; anything else is damage
  // (a flipped continuation bit would otherwise decode to the same handle).
  const size_t used = 40 - handles.size();
  const size_t shortest = VarintLength(meta.offset) + VarintLength(meta.size) + VarintLength(index.offset) +
                          VarintLength(index.size);
  if (used != shortest || handles.find_first_not_of('\0') != std::string_view::npos) {
    return DataLossAt("table.footer", path, "", footer_at + (40 - handles.size()),
                      "malformed table footer (padding or handle encoding)");
  }
  for (const BlockHandle* h : {&meta, &index}) {
    if (h->offset > footer_at || h->size > footer_at - h->offset ||
        footer_at - h->offset - h->size < kBlockTrailerSize) {
      return DataLossAt("table.footer", path, "", footer_at,
                        StrCat("footer handle (offset ", h->offset, ", size ", h->size,
                                     ") points outside the file"));
    }
  }
  std::string storage;
  // The metaindex block is empty in every TensorFlow table; it is read only so that its
  // checksum is verified (a damaged byte anywhere in the file is then an error).
  TFCKPT_RETURN_IF_ERROR(t->ReadBlock(meta, &storage).status());
  TFCKPT_ASSIGN_OR_RETURN(std::string_view index_block, t->ReadBlock(index, &storage));
  KeyOrder order;
  absl::Status s = t->ParseBlock(
      index_block, index.offset, &order,
      [&](std::string_view key, std::string_view value, uint64_t) -> absl::Status {
        DataBlockInfo info{std::string(key), {}};
        if (!DecodeHandle(&value, &info.handle)) {
          return DataLossAt("table.index", path, key, index.offset, "malformed block handle in the index block");
        }
        t->blocks_.push_back(std::move(info));
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return t;
}

absl::StatusOr<std::string_view> TableReader::ReadBlock(const BlockHandle& h, std::string* storage) {
  const std::string& path = file_->path();
  if (h.size > file_->size() || h.offset > file_->size() - h.size ||
      file_->size() - h.offset - h.size < kBlockTrailerSize) {
    return DataLossAt("table.block-bounds", path, "", h.offset,
                      StrCat("block of ", h.size, " bytes plus trailer runs past the end of the file (",
                                   file_->size(), " bytes)"));
  }
  std::string_view raw = all_.substr(h.offset, h.size + kBlockTrailerSize);
  const unsigned char type = static_cast<unsigned char>(raw[h.size]);
  const uint32_t stored = crc32c::Unmask(DecodeFixed32(raw.data() + h.size + 1));
  const uint32_t actual = crc32c::Value(raw.data(), h.size + 1);
  // Fuzzing builds accept any checksum so that mutated inputs reach the parsers behind it.
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  constexpr bool kCheckCrc = true;
#else
  constexpr bool kCheckCrc = false;
#endif
  if (kCheckCrc && stored != actual) {
    return DataLossAt("table.block-crc", path, "", h.offset,
                      StrCat("block checksum mismatch (stored ", absl::Hex(stored, absl::kZeroPad8),
                                   ", computed ", absl::Hex(actual, absl::kZeroPad8), ")"));
  }
  std::string_view contents = raw.substr(0, h.size);
  if (type == 0) return contents;
  if (type != 1) {
    return DataLossAt("table.compression", path, "", h.offset + h.size, StrCat("unknown block compression type ", type));
  }
  saw_snappy_ = true;
  size_t ulen = 0;
  if (!snappy::GetUncompressedLength(contents.data(), contents.size(), &ulen)) {
    return DataLossAt("table.compression", path, "", h.offset, "corrupt Snappy block header");
  }
  // Snappy expands at most ~22x (a 3-byte copy emits 64 bytes); larger claims are corrupt
  // and must not drive an allocation.
  if (ulen > contents.size() * 32 + 64) {
    return DataLossAt("table.compression", path, "", h.offset,
                      StrCat("Snappy block claims ", ulen, " bytes from ", contents.size()));
  }
  storage->resize(ulen);
  if (!snappy::RawUncompress(contents.data(), contents.size(), storage->data())) {
    return DataLossAt("table.compression", path, "", h.offset, "corrupt Snappy block");
  }
  return std::string_view(*storage);
}

absl::Status TableReader::ParseBlock(std::string_view block, uint64_t block_offset, KeyOrder* order,
                                     const Visitor& visit) {
  const std::string& path = file_->path();
  if (block.size() < 4) return DataLossAt("table.restarts", path, "", block_offset, "block shorter than its restart count");
  const uint64_t num_restarts = DecodeFixed32(block.data() + block.size() - 4);
  if (num_restarts == 0) return absl::OkStatus();  // TF treats this as an empty block
  if (num_restarts > (block.size() - 4) / 4) {
    return DataLossAt("table.restarts", path, "", block_offset,
                      StrCat("restart count ", num_restarts, " does not fit in a ", block.size(), "-byte block"));
  }
  const size_t entries_end = block.size() - 4 - 4 * num_restarts;
  const char* restarts = block.data() + entries_end;
  if (entries_end > 0 && DecodeFixed32(restarts) != 0) {
    return DataLossAt("table.restarts", path, "", block_offset, "first restart point is not 0");
  }
  size_t next_restart = 0;  // index into the restart array
  uint64_t next_restart_offset = 0;
  std::string prev;  // previous key of this block, for prefix decoding
  std::string_view rest = block.substr(0, entries_end);
  while (!rest.empty()) {
    const size_t at = entries_end - rest.size();
    const uint64_t entry_offset = block_offset + at;  // exact for uncompressed blocks
    uint32_t shared, non_shared, value_len;
    if (!GetVarint32(&rest, &shared) || !GetVarint32(&rest, &non_shared) || !GetVarint32(&rest, &value_len)) {
      return DataLossAt("table.entry", path, "", entry_offset, "truncated entry header in block");
    }
    if (shared > prev.size()) {
      return DataLossAt("table.entry", path, "", entry_offset, "entry shares more key bytes than the previous key has");
    }
    if (static_cast<uint64_t>(non_shared) + value_len > rest.size()) {
      return DataLossAt("table.entry", path, "", entry_offset, "entry runs past the end of its block");
    }
    if (next_restart < num_restarts && at > next_restart_offset) {
      return DataLossAt("table.restarts", path, "", block_offset + next_restart_offset, "restart point does not start an entry");
    }
    if (next_restart < num_restarts && at == next_restart_offset) {
      if (shared != 0) return DataLossAt("table.restarts", path, "", entry_offset, "restart entry has a shared key prefix");
      if (++next_restart < num_restarts) {
        const uint32_t n = DecodeFixed32(restarts + 4 * next_restart);
        if (n <= next_restart_offset || n >= entries_end) {
          return DataLossAt("table.restarts", path, "", block_offset, "restart array is not increasing inside the block");
        }
        next_restart_offset = n;
      }
    }
    prev.resize(shared);
    prev.append(rest.data(), non_shared);
    if (order != nullptr) {
      if (order->any && !(prev > order->last)) {
        return DataLossAt("table.key-order", path, prev, entry_offset, "keys are not strictly increasing");
      }
      order->any = true;
      order->last = prev;
    }
    std::string_view value = rest.substr(non_shared, value_len);
    rest.remove_prefix(non_shared + value_len);
    TFCKPT_RETURN_IF_ERROR(visit(prev, value, block_offset));
  }
  if (next_restart < num_restarts) {
    return DataLossAt("table.restarts", path, "", block_offset + next_restart_offset, "restart point does not start an entry");
  }
  return absl::OkStatus();
}

absl::Status TableReader::VisitBlock(size_t i, KeyOrder* order, const Visitor& visit) {
  std::string storage;
  TFCKPT_ASSIGN_OR_RETURN(std::string_view block, ReadBlock(blocks_.at(i).handle, &storage));
  return ParseBlock(block, blocks_[i].handle.offset, order, visit);
}

absl::Status TableReader::ForEach(const Visitor& visit) {
  KeyOrder order;
  for (size_t i = 0; i < blocks_.size(); ++i) TFCKPT_RETURN_IF_ERROR(VisitBlock(i, &order, visit));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> TableReader::Get(std::string_view key) {
  // First block whose separator is >= key.
  size_t lo = 0, hi = blocks_.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (blocks_[mid].separator < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == blocks_.size()) return std::optional<std::string>();
  std::string storage;
  TFCKPT_ASSIGN_OR_RETURN(std::string_view block, ReadBlock(blocks_[lo].handle, &storage));
  std::optional<std::string> found;
  KeyOrder order;
  TFCKPT_RETURN_IF_ERROR(ParseBlock(block, blocks_[lo].handle.offset, &order,
                                    [&](std::string_view k, std::string_view v, uint64_t) {
                                      if (k == key) found = std::string(v);
                                      return absl::OkStatus();
                                    }));
  return found;
}

absl::Status VisitTable(TableReader& table, std::vector<Finding>* findings, const TableReader::Visitor& visit) {
  if (findings == nullptr) return table.ForEach(visit);
  // Lenient: a damaged block or entry is recorded and the walk goes on with the next.
  TableReader::KeyOrder order;
  for (size_t i = 0; i < table.data_blocks().size(); ++i) {
    absl::Status s = table.VisitBlock(i, &order, [&](std::string_view k, std::string_view v, uint64_t off) {
      absl::Status r = visit(k, v, off);
      if (!r.ok()) findings->push_back(FindingOf(r));
      return absl::OkStatus();
    });
    if (!s.ok()) findings->push_back(FindingOf(s));
  }
  return absl::OkStatus();
}

}  // namespace tfckpt
