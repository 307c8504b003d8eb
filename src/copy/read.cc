// ReadTensor (tfckpt/read.h): a box of a logical tensor into the caller's buffer, over the
// stored pieces' ranged reads (Checkpoint::ReadInto) where the box and the pieces are whole
// rows, else over the copy engine (CopyRegion) with a sink that fills the buffer.
#include "tfckpt/read.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "copy/copy.h"
#include "run/run.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {
namespace {

// Appends copied bytes to the caller's buffer; the current run's test hook reaches
// "read-chunk" before each append, and a stop request ends the copy there.
class BufferSink : public PieceSink {
 public:
  BufferSink(char* out, size_t capacity) : out_(out), capacity_(capacity) {}
  absl::Status Append(std::string_view bytes) override {
    TFCKPT_RETURN_IF_ERROR(Reached("read-chunk"));
    if (bytes.size() > capacity_ - used_) return absl::InternalError("bug: region larger than its buffer");
    std::memcpy(out_ + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
    return absl::OkStatus();
  }
  size_t used() const { return used_; }

 private:
  char* out_;
  size_t capacity_;
  size_t used_ = 0;
};

bool Widened(const TensorEntry& t, const ReadOptions& options) {
  return options.bfloat16_as_float32 && static_cast<DType>(t.dtype) == DType::kBFloat16;
}

// Where the box and every stored piece it touches are whole rows (a tensor stored whole, or
// partitioned on axis 0: nearly every checkpoint), each piece's part is read straight into
// its place (Checkpoint::ReadInto: no other copy), each piece read whole with its checksum
// checked when `verify`. False (nothing read) for other layouts and for boxes with
// elements in no stored piece (CopyRegion names those).
bool ReadRows(const Checkpoint& c, const TensorEntry& t, const Region& box, int64_t esize, bool verify, char* out,
              absl::Status* status) {
  bool rows = box.rank() == 0 || box.WholeRowsOf(t.shape);
  std::vector<const StoredSlice*> sources;
  int64_t covered = 0;
  for (const StoredSlice& s : t.slices) {
    if (box.rank() == 0) {
      sources.push_back(&s);
      covered = 1;
      break;
    }
    auto inter = Intersect(s.region, box);
    if (!inter) continue;
    if (!s.region.WholeRowsOf(t.shape)) rows = false;
    sources.push_back(&s);
    covered += inter->num_elements();
  }
  if (!rows || covered != box.num_elements()) return false;
  const int64_t row_bytes = box.rank() == 0 ? esize : (box.num_elements() / box.shape[0]) * esize;
  for (const StoredSlice* s : sources) {
    int64_t lo = 0, hi = 1, s0 = 0, r0 = 0;
    if (box.rank() > 0) {
      s0 = s->region.start[0];
      r0 = box.start[0];
      lo = std::max(s0, r0);
      hi = std::min(s0 + s->region.shape[0], r0 + box.shape[0]);
    }
    *status = c.ReadInto(t, *s, static_cast<uint64_t>((lo - s0) * row_bytes),
                         static_cast<uint64_t>((hi - s0) * row_bytes), out + (lo - r0) * row_bytes, verify);
    if (!status->ok()) break;
  }
  return true;
}

absl::Status ReadBox(const Checkpoint& c, const TensorEntry& t, const Region& box, char* out, size_t out_size,
                     const ReadOptions& options) {
  if (box.empty()) return absl::OkStatus();
  const bool widen = Widened(t, options);
  if (!widen) {
    absl::Status st;
    if (ReadRows(c, t, box, LookupDType(t.dtype)->element_size, options.verify, out, &st)) return st;
  }
  // Through the copy engine, which checks the pieces it reads whole, front to back, when
  // the box is the whole tensor; inside a smaller box the pieces it covers whole are
  // checked beforehand (a second read of those), so that every piece covered whole is.
  const bool whole = box.Covers(t.shape);
  std::string buffer;
  if (options.verify && !whole) {
    for (const StoredSlice& s : t.slices) {
      auto inter = Intersect(s.region, box);
      if (inter && *inter == s.region) TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, s, &buffer));
    }
  }
  BufferSink sink(out, out_size);
  absl::Status st;
  if (widen) {
    CastSink cast(t.dtype, static_cast<int32_t>(DType::kFloat), sink);
    st = CopyRegion(c, t, box, cast, &buffer, nullptr, options.verify && whole);
  } else {
    st = CopyRegion(c, t, box, sink, &buffer, nullptr, options.verify && whole);
  }
  if (st.ok() && sink.used() != out_size) st = absl::InternalError("bug: the copy of a box left its buffer short");
  return st;
}

}  // namespace

absl::StatusOr<size_t> ReadSize(const TensorEntry& t, const Region& box, const ReadOptions& options) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("tensor \"", PrintableKey(t.name), "\": dtype ", DTypeName(t.dtype), " cannot be read"));
  }
  if (info->element_size == 0) {
    return absl::InvalidArgumentError(StrCat("tensor \"", PrintableKey(t.name), "\": a ", info->name,
                                             " tensor has no fixed-size elements to read into a buffer"));
  }
  if (box.start.size() != box.shape.size() || box.rank() != t.shape.size() || !box.InsideOf(t.shape)) {
    return absl::InvalidArgumentError(StrCat("tensor \"", PrintableKey(t.name), "\": the box at ",
                                             ShapeString(box.start), " of shape ", ShapeString(box.shape),
                                             " is not inside its shape ", ShapeString(t.shape)));
  }
  const int64_t esize = Widened(t, options) ? 4 : info->element_size;
  return static_cast<size_t>(box.num_elements() * esize);
}

absl::Status ReadTensor(const Checkpoint& c, const TensorEntry& t, const Region& box, char* out, size_t out_size,
                        const ReadOptions& options) {
  TFCKPT_RETURN_IF_ERROR(c.DefectError(t));
  TFCKPT_ASSIGN_OR_RETURN(const size_t size, ReadSize(t, box, options));
  if (out_size != size) {
    return absl::InvalidArgumentError(StrCat("tensor \"", PrintableKey(t.name), "\": the box at ",
                                             ShapeString(box.start), " of shape ", ShapeString(box.shape), " is ",
                                             size, " bytes, the buffer ", out_size));
  }
  if (!options.stop.stop_possible()) return ReadBox(c, t, box, out, out_size, options);
  // The stop request reaches the reads through a run of their own (run/run.h), which
  // creates nothing and so has nothing to undo.
  RunOptions ro;
  ro.stop = options.stop;
  auto run = std::make_shared<Run>(std::move(ro));
  absl::Status st;
  {
    RunScope scope(run.get());
    st = run->CheckStop();
    if (st.ok()) st = ReadBox(c, t, box, out, out_size, options);
  }
  run->Keep();
  return st;
}

absl::Status ReadTensor(const Checkpoint& c, const TensorEntry& t, char* out, size_t out_size,
                        const ReadOptions& options) {
  return ReadTensor(c, t, Region::Full(t.shape), out, out_size, options);
}

}  // namespace tfckpt
