// The copy engine's execution of a whole plan (ExecutePlan, see copy.h): every output
// data file laid out first, then filled by work units on several threads.
#include <set>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "copy_internal.h"
#include "base/crc32c.h"
#include "base/parallel.h"
#include "base/path.h"
#include "format/bundle/bundle_writer.h"
#include "copy/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace {

using copy_internal::CheckCopiedCrc;
using copy_internal::kChunkBytes;
using copy_internal::kSpanBytes;
using copy_internal::MovesInKernel;
using copy_internal::SourcesOf;

// Writes every piece of the fixed-size tensor `t` in one pass over its stored pieces:
// slabs of whole rows (axis 0, about kSpanBytes, so a slab stays in cache between being
// read and being split) are read once from each stored piece,
// and each output piece takes its part of the slab (a contiguous part of that piece, as
// slabs span every other axis). For cuts on other axes this reads the input once instead
// of once per output piece. Each stored V2 piece is read front to back, so its CRC is
// checked on the way. `streams[k]` receives piece k.
// REQUIRES: t.shape has rank >= 1 and rows of at most kChunkBytes.
absl::Status GatherPieces(const Checkpoint& c, const TensorEntry& t, const std::vector<const PlannedPiece*>& pieces,
                          std::vector<BundleWriter::EntryStream>& streams, std::atomic<uint64_t>* progress,
                          const std::atomic<bool>& stop) {
  // The slabs below are sized from the shape: only once the pieces are known to hold it.
  TFCKPT_RETURN_IF_ERROR(c.CheckStored(t));
  const int64_t esize = LookupDType(t.dtype)->element_size;
  const int64_t rows = t.shape[0];
  const int64_t row_bytes = rows == 0 ? 0 : *NumElements(t.shape) / rows * esize;
  const int64_t slab_rows = std::max<int64_t>(1, kSpanBytes / std::max<int64_t>(1, row_bytes));
  const bool has_crc = c.info().format == Format::kV2 && !c.info().big_endian;
  struct Source {
    const StoredSlice* s;
    int64_t row_elems;
    crc32c::Cursor crc = {};
    TensorBytes owner = {};
  };
  std::vector<Source> sources;
  for (const StoredSlice& s : t.slices) {
    if (s.region.empty()) continue;
    sources.push_back({&s, s.region.num_elements() / s.region.shape[0]});
  }
  std::vector<std::string> out(pieces.size());
  std::vector<std::optional<Region>> part(pieces.size());
  std::string stage;
  for (int64_t a = 0; a < rows; a += slab_rows) {
    if (stop) return absl::OkStatus();
    Region slab;
    slab.start.assign(t.shape.size(), 0);
    slab.shape = t.shape;
    slab.start[0] = a;
    slab.shape[0] = std::min(slab_rows, rows - a);
    for (size_t k = 0; k < pieces.size(); ++k) {
      part[k] = Intersect(slab, pieces[k]->region);
      if (part[k]) out[k].resize(static_cast<size_t>(part[k]->num_elements() * esize));
    }
    for (Source& src : sources) {
      const auto inter = Intersect(slab, src.s->region);  // whole rows of the stored piece
      if (!inter) continue;
      const int64_t first = (inter->start[0] - src.s->region.start[0]) * src.row_elems;
      const uint64_t begin = static_cast<uint64_t>(first * esize);
      const uint64_t end = begin + static_cast<uint64_t>(inter->shape[0] * src.row_elems * esize);
      TFCKPT_ASSIGN_OR_RETURN(std::string_view bytes, c.ReadRange(t, *src.s, begin, end, &stage, &src.owner));
      src.crc.Feed(begin, bytes);
      for (size_t k = 0; k < pieces.size(); ++k) {
        if (!part[k]) continue;
        const auto sub = Intersect(*inter, pieces[k]->region);
        if (!sub) continue;
        char* dst = out[k].data();
        ForEachRun(*sub, {&*part[k], &src.s->region}, [&](const int64_t* off, int64_t n) {
          std::memcpy(dst + off[0] * esize, bytes.data() + (off[1] - first) * esize, static_cast<size_t>(n * esize));
        });
      }
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (!part[k]) continue;
      TFCKPT_RETURN_IF_ERROR(streams[k].Append(out[k]));
      if (progress) *progress += out[k].size();
    }
  }
  if (has_crc) {
    for (const Source& src : sources) {
      if (src.crc.Covered(src.s->data.size)) TFCKPT_RETURN_IF_ERROR(CheckCopiedCrc(c, t, *src.s, src.crc.crc));
    }
  }
  for (auto& st : streams) TFCKPT_RETURN_IF_ERROR(st.Close());
  return absl::OkStatus();
}

// Whether GatherPieces should write the pieces of `tp` (rather than one CopyRegion per
// piece): several fixed-size pieces, rows that fit a slab, and some piece that cannot be
// moved in-kernel (a cut on an axis other than 0).
bool GathersTogether(const Checkpoint& c, const TensorPlan& tp) {
  const TensorEntry& t = *tp.source;
  const DTypeInfo* info = LookupDType(t.dtype);
  if (tp.pieces.size() < 2 || info == nullptr || info->element_size == 0 || t.shape.empty()) return false;
  auto n = NumElements(t.shape);
  if (!n.ok() || *n == 0 || *n / t.shape[0] * info->element_size > kChunkBytes) return false;
  for (const PlannedPiece& p : tp.pieces) {
    if (!MovesInKernel(c, t, SourcesOf(t, p.region), p.region)) return true;
  }
  return false;
}

// Whether `c` is a little-endian V2 bundle and every stored piece of `t` and every planned
// piece of `tp` spans whole rows
// (all of axes 1.. of a fixed-size tensor): the pieces the verification can prove equal to
// the input by CRCs alone once they were read back (CompareOptions::crc_holds).
bool CutOnAxis0Only(const Checkpoint& c, const TensorEntry& t, const TensorPlan& tp) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr || info->element_size == 0) return false;
  if (c.info().format != Format::kV2 || c.info().big_endian) return false;  // its CRCs are not the bytes'
  for (const StoredSlice& s : t.slices) {
    if (!s.region.WholeRowsOf(t.shape)) return false;
  }
  for (const PlannedPiece& p : tp.pieces) {
    if (!p.region.WholeRowsOf(t.shape)) return false;
  }
  return true;
}

}  // namespace

absl::Status RunUnits(const std::vector<WorkUnit>& units, int jobs,
                      const std::function<absl::Status(size_t unit, const std::atomic<bool>& stop)>& run) {
  std::vector<size_t> order(units.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return units[x].bytes > units[y].bytes; });
  int32_t num_files = 0;
  for (const WorkUnit& u : units) {
    for (int32_t f : u.files) num_files = std::max(num_files, f + 1);
  }
  // A thread takes the largest unit whose files no other thread is writing (two writers of
  // one file only take turns on its lock), else the largest left.
  std::mutex mu;
  std::vector<char> taken(order.size(), 0);
  std::vector<int> busy(static_cast<size_t>(num_files), 0);
  size_t first_left = 0;
  auto take = [&]() -> std::optional<size_t> {
    std::lock_guard<std::mutex> lock(mu);
    while (first_left < order.size() && taken[first_left]) ++first_left;
    std::optional<size_t> pick;
    for (size_t k = first_left, seen = 0; k < order.size() && seen < 64; ++k) {
      if (taken[k]) continue;
      ++seen;
      if (!pick) pick = k;
      bool idle = true;
      for (int32_t f : units[order[k]].files) idle = idle && busy[f] == 0;
      if (idle) {
        pick = k;
        break;
      }
    }
    if (!pick) return std::nullopt;
    taken[*pick] = 1;
    for (int32_t f : units[order[*pick]].files) ++busy[f];
    return order[*pick];
  };
  auto done = [&](size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    for (int32_t f : units[i].files) --busy[f];
  };
  const int threads = std::min<int>(Jobs(jobs), static_cast<int>(std::max<size_t>(1, units.size())));
  return ParallelForStatus(static_cast<size_t>(threads), threads, [&](size_t, const std::atomic<bool>& stop) {
    while (!stop) {
      const std::optional<size_t> i = take();
      if (!i) break;
      absl::Status st = run(*i, stop);
      done(*i);
      TFCKPT_RETURN_IF_ERROR(st);
    }
    return absl::OkStatus();
  });
}

absl::Status ExecutePlan(const Checkpoint& c, const WritePlan& plan, const std::string& out_prefix,
                         const ExecuteOptions& options) {
  BundleWriterOptions wo;
  wo.num_shards = plan.num_files;
  wo.overwrite = options.overwrite;
  wo.before_commit = options.before_commit;
  if (options.read_back) {
    std::set<std::string, std::less<>> rows;
    for (const TensorPlan& tp : plan.tensors) {
      if (CutOnAxis0Only(c, *tp.source, tp)) rows.insert(tp.out_name());
    }
    wo.read_back = [rows = std::move(rows)](std::string_view name) { return rows.count(name) > 0; };
  }
  TFCKPT_ASSIGN_OR_RETURN(auto writer, BundleWriter::Create(Location::Of(out_prefix), wo));
  // Every entry's size is known before a byte is written, so each data file is laid out
  // first (its entries in plan order, as one writer per file would append them) and then
  // filled positionally by whichever thread is free: work units are tensors written
  // together (GatherPieces) or single pieces, largest first.
  struct Unit {
    const TensorPlan* tp;
    std::vector<const PlannedPiece*> pieces;
    std::vector<uint64_t> at;
    uint64_t bytes = 0;
  };
  std::vector<Unit> units;
  std::vector<uint64_t> end(static_cast<size_t>(plan.num_files), 0);
  for (size_t k = 0; k < plan.tensors.size(); ++k) {
    const TensorPlan& tp = plan.tensors[plan.order.empty() ? k : plan.order[k]];
    const bool together = GathersTogether(c, tp);
    for (const PlannedPiece& p : tp.pieces) {
      TFCKPT_ASSIGN_OR_RETURN(uint64_t size, PieceSize(c, *tp.source, p.region));
      if (!together || units.empty() || units.back().tp != &tp) units.push_back({&tp, {}, {}, 0});
      units.back().pieces.push_back(&p);
      units.back().at.push_back(end[p.file]);
      units.back().bytes += size;
      end[p.file] += size;
    }
  }
  // Bytes that move unchanged (single pieces CopyRegion moves in runs) may be copied inside
  // the store: each data file is told which, with its size, before a byte of it is written.
  // A piece the store copies (some of) is never read here where its CRC is known
  // (whole stored pieces) or the verification reads it back anyway (the writer then takes
  // its CRC from the completed object: BundleWriter::AddCopiedAt); otherwise (a run without
  // verification that cuts a stored piece) it is read, for the new piece's CRC, as it is
  // copied.
  std::vector<RegionCopies> unit_copies(units.size());
  if (options.server_side != ServerSideCopy::kNever && IsUrl(out_prefix)) {
    std::vector<std::vector<PlannedCopy>> copies(static_cast<size_t>(plan.num_files));
    for (size_t i = 0; i < units.size(); ++i) {
      const Unit& u = units[i];
      if (u.pieces.size() != 1) continue;
      TFCKPT_ASSIGN_OR_RETURN(unit_copies[i], PlannedCopiesOf(c, *u.tp->source, u.pieces[0]->region, u.at[0]));
      std::vector<PlannedCopy>& to = copies[static_cast<size_t>(u.pieces[0]->file)];
      to.insert(to.end(), unit_copies[i].copies.begin(), unit_copies[i].copies.end());
    }
    for (int32_t f = 0; f < plan.num_files; ++f) {
      TFCKPT_RETURN_IF_ERROR(
          writer->PlanCopies(f, end[static_cast<size_t>(f)], copies[static_cast<size_t>(f)], options.server_side)
              .status());
    }
  }
  std::vector<WorkUnit> work;
  for (const Unit& u : units) {
    WorkUnit w{u.bytes, {}};
    for (const PlannedPiece* p : u.pieces) w.files.push_back(p->file);
    work.push_back(std::move(w));
  }
  TFCKPT_RETURN_IF_ERROR(RunUnits(work, options.jobs, [&](size_t i, const std::atomic<bool>& stop) -> absl::Status {
    const Unit& u = units[i];
    const TensorEntry& t = *u.tp->source;
    if (u.pieces.size() == 1) {
      PieceCopier pw(c, *writer, options.progress);
      return pw.WriteCopiedAt(t, *u.pieces[0], u.tp->out_name(), u.at[0], u.bytes, unit_copies[i],
                              wo.read_back && wo.read_back(u.tp->out_name()));
    }
    std::vector<BundleWriter::EntryStream> streams;
    for (size_t k = 0; k < u.pieces.size(); ++k) {
      const PlannedPiece& p = *u.pieces[k];
      const std::optional<Region> region =
          p.region.Covers(t.shape) ? std::nullopt : std::optional<Region>(p.region);
      TFCKPT_ASSIGN_OR_RETURN(auto s, writer->BeginEntryAt(u.tp->out_name(), t.dtype, t.shape, region, p.file, u.at[k],
                                                           p.extents ? &*p.extents : nullptr));
      streams.push_back(std::move(s));
    }
    return GatherPieces(c, t, u.pieces, streams, options.progress, stop);
  }));
  return writer->Finish();
}

}  // namespace tfckpt
