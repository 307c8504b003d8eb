#include "kvstore/s3/s3_storage.h"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <thread>
#include <list>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "base/parallel.h"
#include "kvstore/s3/credentials.h"
#include "kvstore/s3/multipart_writer.h"
#include "kvstore/s3/ranges.h"
#include "kvstore/s3/store_options.h"
#include "run/left_behind.h"
#include "run/run.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {

// Read-ahead windows of every open object, least recently used dropped first.
class WindowCache {
 public:
  using Bytes = std::shared_ptr<const std::string>;
  using Fetch = std::function<absl::StatusOr<Bytes>()>;

  // The window [`start`, `start` + `size`) of `object`: from the cache, else fetch()ed
  // (once, however many threads ask at the same time). A failed fetch is not kept.
  absl::StatusOr<Bytes> Get(const std::string& object, uint64_t start, uint64_t size, const Fetch& fetch) {
    std::shared_future<absl::StatusOr<Bytes>> ready;
    std::promise<absl::StatusOr<Bytes>> mine;
    bool fetch_here = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find_if(lru_.begin(), lru_.end(), [&](const Entry& e) { return e.Is(object, start, size); });
      if (it != lru_.end()) {
        lru_.splice(lru_.begin(), lru_, it);
        ready = it->bytes;
      } else {
        ready = mine.get_future().share();
        lru_.push_front({object, start, size, ready});
        if (lru_.size() > static_cast<size_t>(kCachedWindows)) lru_.pop_back();
        fetch_here = true;
      }
    }
    if (fetch_here) {
      absl::StatusOr<Bytes> got = fetch();
      if (!got.ok()) Forget(object, start, size);
      mine.set_value(std::move(got));
    }
    return ready.get();
  }

 private:
  struct Entry {
    std::string object;
    uint64_t start, size;
    std::shared_future<absl::StatusOr<Bytes>> bytes;
    bool Is(const std::string& o, uint64_t b, uint64_t n) const { return start == b && size == n && object == o; }
  };

  void Forget(const std::string& object, uint64_t start, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.remove_if([&](const Entry& e) { return e.Is(object, start, size); });
  }

  std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
};

namespace {

// `s` with `url` in front unless its message names it already.
absl::Status Named(const absl::Status& s, const std::string& url) {
  if (s.ok() || absl::StrContains(s.message(), url)) return s;
  return Annotate(s, url);
}

// The reads that fill [offset, offset + n) of `out` (which holds that range), in pieces
// of at most `piece` bytes.
std::vector<RangeRead> Pieces(uint64_t offset, uint64_t n, uint64_t piece, char* out) {
  std::vector<RangeRead> reads;
  for (const ByteRange& r : PlanRangeRequests({{offset, n}}, 0, piece)) {
    reads.push_back({r.offset, r.size, out + (r.offset - offset)});
  }
  return reads;
}

// `s` of a read of `name` pinned to `etag`, said plainly when the pin failed.
absl::Status ReadError(const absl::Status& s, const std::string& name, const std::string& etag) {
  if (absl::IsFailedPrecondition(s)) {
    return absl::FailedPreconditionError(StrCat(name, ": the object was replaced since it was opened (its ETag ", etag,
                                                " no longer matches): ", s.message()));
  }
  return Named(s, name);
}

}  // namespace

// Bytes that sequential scans of one store's objects hold (fetched or on their way), and
// scans under way, all threads together.
struct ScanBudget {
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> scans{0};

  bool Reserve(uint64_t n, uint64_t budget) {
    uint64_t used = bytes.load();
    do {
      if (used + n > budget) return false;
    } while (!bytes.compare_exchange_weak(used, used + n));
    return true;
  }
};

namespace {

// A thread joined when the last holder lets it go.
class Joined {
 public:
  explicit Joined(std::thread t) : t_(std::move(t)) {}
  ~Joined() { t_.join(); }
  Joined(const Joined&) = delete;
  Joined& operator=(const Joined&) = delete;

 private:
  std::thread t_;
};

// A piece of a scan: [offset, offset + size) of the object, fetched by a thread of its own
// (joined when the piece is dropped: no thread outlives the scan).
struct ScanPiece {
  uint64_t offset = 0, size = 0;
  std::shared_future<absl::StatusOr<WindowCache::Bytes>> bytes;
  std::shared_ptr<Joined> fetch;
};

// The sequential scan this thread announced (WillReadSequentially): the object (URL and
// ETag), its byte range, and the pieces requested ahead of the reader, in order.
// Counted in its store's budget from Start() until End() (or the thread's end).
struct Scan {
  std::string object;  // "" when there is none
  uint64_t end = 0;
  uint64_t next = 0;  // the first byte not yet requested
  std::deque<ScanPiece> pieces;
  std::shared_ptr<ScanBudget> budget;  // set while counted

  void Start(std::string key, uint64_t begin, uint64_t stop, std::shared_ptr<ScanBudget> of) {
    End();
    object = std::move(key);
    next = begin;
    end = stop;
    budget = std::move(of);
    budget->scans.fetch_add(1);
  }
  void End() {
    object.clear();
    pieces.clear();
    if (budget) budget->scans.fetch_sub(1);
    budget.reset();
  }
  ~Scan() { End(); }
};
thread_local Scan t_scan;

// Where this thread's last read of a large piece outside any scan ended (FileLayout): a
// read that continues it starts a scan.
struct LastRead {
  std::string object;
  uint64_t end = 0;
};
thread_local LastRead t_last_read;

// The small range this thread last announced (WillReadSequentially): its reads are part of
// a command's pass over the pieces, served by their groups from the first.
struct Announced {
  std::string object;
  uint64_t begin = 0, end = 0;
};
thread_local Announced t_announced;

// Fetches [offset, offset + size) of the object on a thread of its own, for the caller's run
// (its stop cuts the fetch short), reserved in `budget`: the bytes give their reservation
// back when the last holder drops them. The thread needs nothing of the S3File, which may
// be closed meanwhile (it holds the client and the budget).
// At most as many fetches at once as `gate` lets through (--connections, for all scans).
ScanPiece FetchPiece(std::shared_ptr<Client> client, const ObjectUrl& url, const std::string& name,
                     const std::string& etag, uint64_t offset, uint64_t size, std::shared_ptr<PartBudget> gate,
                     std::shared_ptr<ScanBudget> budget) {
  auto done = std::make_shared<std::promise<absl::StatusOr<WindowCache::Bytes>>>();
  ScanPiece piece{offset, size, done->get_future().share(), nullptr};
  piece.fetch = std::make_shared<Joined>(StartThread([client, url, name, etag, offset, size, done, gate, budget] {
    gate->Acquire();
    struct Release {
      PartBudget* gate;
      ~Release() { gate->Release(); }
    } release{gate.get()};
    std::shared_ptr<std::string> bytes(new std::string(static_cast<size_t>(size), '\0'), [size, budget](std::string* b) {
      delete b;
      budget->bytes.fetch_sub(size);
    });
    absl::Status s = client->Read(url, offset, size, etag, bytes->data());
    if (s.ok()) {
      done->set_value(WindowCache::Bytes(std::move(bytes)));
    } else {
      done->set_value(ReadError(s, name, etag));
    }
  }));
  return piece;
}

}  // namespace

FileLayout::FileLayout(std::vector<std::pair<uint64_t, uint64_t>> pieces, uint64_t window) {
  std::sort(pieces.begin(), pieces.end());
  for (const auto& [offset, size] : pieces) {
    if (size == 0) continue;
    const uint64_t end = offset + size < offset ? UINT64_MAX : offset + size;  // (overflow-safe: untrusted)
    if (!begin_.empty() && offset < end_.back()) {  // overlapping pieces read as one
      end_.back() = std::max(end_.back(), end);
      continue;
    }
    begin_.push_back(offset);
    end_.push_back(end);
  }
  group_.assign(begin_.size(), kNone);
  for (size_t i = 0; i < begin_.size(); ++i) {
    if (end_[i] - begin_[i] >= kScanMinBytes) continue;  // large: never fetched with another
    const bool joins = i > 0 && group_[i - 1] != kNone && end_[i] - groups_.back().first <= window;
    if (!joins) groups_.push_back({begin_[i], end_[i]});
    groups_.back().second = end_[i];
    group_[i] = groups_.size() - 1;
  }
}

std::optional<FileLayout::Fetch> FileLayout::For(uint64_t offset, uint64_t n) const {
  const auto it = std::upper_bound(begin_.begin(), begin_.end(), offset);
  if (it == begin_.begin()) return std::nullopt;
  const size_t i = static_cast<size_t>(it - begin_.begin()) - 1;
  if (offset >= end_[i] || n > end_[i] - offset) return std::nullopt;  // (beyond the piece)
  if (group_[i] == kNone) return Fetch{offset, n, false, end_[i]};
  return Fetch{groups_[group_[i]].first, groups_[group_[i]].second - groups_[group_[i]].first, true, end_[i]};
}

namespace {

class S3File final : public ReadableFile {
 public:
  S3File(std::shared_ptr<Client> client, ObjectUrl url, ObjectInfo info, uint64_t window,
         std::shared_ptr<WindowCache> cache, std::shared_ptr<PartBudget> gate, std::shared_ptr<ScanBudget> scans,
         int connections)
      : client_(std::move(client)),
        url_(std::move(url)),
        name_(url_.ToString()),
        info_(std::move(info)),
        window_(window),
        cache_(std::move(cache)),
        gate_(std::move(gate)),
        scans_(std::move(scans)),
        connections_(connections) {}

  // A scan of this object by the thread that closes it ends here, its fetches joined: a
  // read-ahead thread never outlives the reads it served (one still running when the
  // process exits would finish after OpenSSL's exit handler and leak its error state).
  ~S3File() override {
    if (t_scan.object == Key()) t_scan.End();
  }

  const std::string& path() const override { return name_; }
  uint64_t size() const override { return info_.size; }

  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (offset > size() || n > size() - offset) return PastEndError(offset, n);
    if (n == 0) return absl::OkStatus();
    if (InScan(offset, n)) return ReadFromScan(offset, n, out);
    if (layout_ != nullptr) {
      // The pieces are known: a small piece's bytes come with its neighbours' (its group,
      // fetched once), a large piece's (or a read across pieces) exactly as asked.
      const std::optional<FileLayout::Fetch> f = layout_->For(offset, n);
      if (f.has_value() && !f->window && t_last_read.object == Key() && t_last_read.end == offset &&
          f->piece_end - offset >= kScanMinBytes) {
        // This thread reads a large piece on from where it stopped, unannounced: from here to
        // the piece's end, its reads are streamed ahead for it (WillReadSequentially).
        t_scan.Start(Key(), offset, f->piece_end, scans_);
        FillScan();
        return ReadFromScan(offset, n, out);
      }
      if (!f.has_value() || !f->window) {
        t_last_read = {Key(), offset + n};
        return Get(offset, n, kPieceBytes, out);
      }
      // The object's first small read fetches just its bytes, unless it was announced
      // (WillReadSequentially: a command that reads piece after piece, which every byte
      // once in groups serves best): a caller that reads one tensor (inspect --tensor, the
      // Python API's read of one) does not pay for its neighbours (a 32 KiB tensor between
      // 3 MiB ones fetched its whole 16 MiB group). From the second read on, the caller
      // reads more than one piece: their groups are fetched, each once.
      const bool announced = t_announced.object == Key() && offset >= t_announced.begin &&
                             offset + n <= t_announced.end;
      if (small_reads_.fetch_add(1) == 0 && !announced) return Get(offset, n, kPieceBytes, out);
      TFCKPT_ASSIGN_OR_RETURN(WindowCache::Bytes window, Window(f->offset, f->size));
      std::memcpy(out, window->data() + (offset - f->offset), static_cast<size_t>(n));
      return absl::OkStatus();
    }
    if (n >= window_) return Get(offset, n, kPieceBytes, out);
    // Through the windows: at most two, as n is smaller than one.
    while (n > 0) {
      const uint64_t start = offset - offset % window_;
      TFCKPT_ASSIGN_OR_RETURN(WindowCache::Bytes window, Window(start, std::min(window_, size() - start)));
      const uint64_t at = offset - start;
      const uint64_t take = std::min<uint64_t>(n, window->size() - at);
      std::memcpy(out, window->data() + at, static_cast<size_t>(take));
      out += take;
      offset += take;
      n -= take;
    }
    return absl::OkStatus();
  }

  // A large range this thread reads next, in order (a tensor verified or copied): it is
  // streamed ahead of the reader in pieces of kPieceBytes, for this thread alone. (Through
  // the windows shared by all threads, J readers of J large tensors evicted each other's
  // windows once J passed kCachedWindows: at -j 8 a validate fetched its bytes 7 times.)
  // Smaller ranges share the windows.
  void WillReadSequentially(uint64_t offset, uint64_t n) const override {
    if (n == 0 || offset > size() || n > size() - offset) return;
    // A smaller range shares the windows, unless it is part of a large piece (FileLayout),
    // whose bytes are never fetched for a window: then exactly it is streamed.
    if (n < kScanMinBytes) {
      if (layout_ == nullptr) return;
      const std::optional<FileLayout::Fetch> f = layout_->For(offset, n);
      if (!f.has_value()) return;
      if (f->window) {
        t_announced = {Key(), offset, offset + n};  // (read through its group: ReadAt)
        return;
      }
    }
    if (InScan(offset, n)) return;  // the scan under way goes on over it (its bytes are on their way)
    t_scan.Start(Key(), offset, offset + n, scans_);
    FillScan();
  }

  void AdviseLayout(const std::vector<std::pair<uint64_t, uint64_t>>& pieces) override {
    layout_ = std::make_shared<const FileLayout>(pieces, window_);
  }

  // What a copy inside the store needs of the object: its client (the store it is in), URL
  // and pinned ETag.
  const Client* client() const { return client_.get(); }
  const ObjectUrl& url() const { return url_; }
  const std::string& etag() const { return info_.etag; }

 private:
  std::string Key() const { return StrCat(name_, " ", info_.etag); }

  bool InScan(uint64_t offset, uint64_t n) const {
    return !t_scan.object.empty() && offset + n <= t_scan.end && t_scan.object == Key() &&
           (t_scan.pieces.empty() ? offset >= t_scan.next : offset >= t_scan.pieces.front().offset);
  }

  // Requests pieces until the scan's end, or its share of the pieces all scans may hold
  // (ScanPieces(connections): as many as transfers run at once, so that one thread's scan
  // keeps every connection busy and J threads' scans share them; at least 2), or until
  // the budget is spent.
  void FillScan() const {
    Scan& s = t_scan;
    const size_t all = ScanPieces(connections_);
    const size_t share = std::max<size_t>(2, all / static_cast<size_t>(std::max(1, scans_->scans.load())));
    while (s.pieces.size() < share && s.next < s.end) {
      const uint64_t size = std::min(kPieceBytes, s.end - s.next);
      if (!scans_->Reserve(size, all * kPieceBytes)) break;
      s.pieces.push_back(FetchPiece(client_, url_, name_, info_.etag, s.next, size, gate_, scans_));
      s.next += size;
    }
  }

  // REQUIRES: InScan(offset, n).
  absl::Status ReadFromScan(uint64_t offset, uint64_t n, char* out) const {
    Scan& s = t_scan;
    while (!s.pieces.empty() && s.pieces.front().offset + s.pieces.front().size <= offset) s.pieces.pop_front();
    if (s.pieces.empty() && offset > s.next) s.next = offset;  // (skipped ahead)
    FillScan();
    while (n > 0) {
      if (s.pieces.empty()) {
        // The budget is spent (other threads' scans hold it): this read goes straight
        // into the caller's buffer, and the scan resumes after it.
        TFCKPT_RETURN_IF_ERROR(Get(offset, n, kPieceBytes, out));
        s.next = std::max(s.next, offset + n);
        return absl::OkStatus();
      }
      const ScanPiece& piece = s.pieces.front();
      const absl::StatusOr<WindowCache::Bytes>& bytes = piece.bytes.get();
      if (!bytes.ok()) {
        absl::Status failed = bytes.status();
        s.End();
        return failed;
      }
      const uint64_t at = offset - piece.offset;
      const uint64_t take = std::min(n, piece.size - at);
      std::memcpy(out, (*bytes)->data() + at, static_cast<size_t>(take));
      out += take;
      offset += take;
      n -= take;
      if (at + take == piece.size) {
        s.pieces.pop_front();
        FillScan();
        if (s.pieces.empty() && s.next >= s.end) s.End();  // (read to its end: its share goes to the others)
      }
    }
    return absl::OkStatus();
  }

  // The window [start, start + n) (REQUIRES: within the object).
  absl::StatusOr<WindowCache::Bytes> Window(uint64_t start, uint64_t n) const {
    return cache_->Get(Key(), start, n, [&]() -> absl::StatusOr<WindowCache::Bytes> {
      auto bytes = std::make_shared<std::string>(static_cast<size_t>(n), '\0');
      TFCKPT_RETURN_IF_ERROR(Get(start, bytes->size(), std::min(window_, kWindowPieceBytes), bytes->data()));
      return WindowCache::Bytes(std::move(bytes));
    });
  }

  absl::Status Get(uint64_t offset, uint64_t n, uint64_t piece, char* out) const {
    return ReadError(client_->ReadRanges(url_, info_.etag, Pieces(offset, n, piece, out)), name_, info_.etag);
  }

  std::shared_ptr<Client> client_;
  ObjectUrl url_;
  std::string name_;
  ObjectInfo info_;
  uint64_t window_;
  std::shared_ptr<WindowCache> cache_;
  std::shared_ptr<PartBudget> gate_;  // scan fetches at once
  std::shared_ptr<ScanBudget> scans_;  // the store's scans together
  int connections_;
  std::shared_ptr<const FileLayout> layout_;  // AdviseLayout's, or none
  mutable std::atomic<uint64_t> small_reads_{0};  // reads of small pieces (FileLayout's groups) so far
};

// The undo of an object the run completed: deleted, or, when the store refuses (no
// s3:DeleteObject: 403 AccessDenied) or the DELETE fails for good, named as left behind
// (run/left_behind.h: the run's error lists it). NotFound: nothing is there.
void DeleteOrNote(Client& client, const ObjectUrl& url) {
  const absl::Status s = client.Delete(url);
  if (!s.ok() && !absl::IsNotFound(s)) NoteLeftBehind(url.ToString());
}

// Bytes in memory as a file: an upload's object while all of it is still held.
class HeldFile final : public ReadableFile {
 public:
  HeldFile(std::string name, std::string_view bytes) : name_(std::move(name)), bytes_(bytes) {}
  const std::string& path() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (offset > size() || n > size() - offset) return PastEndError(offset, n);
    std::memcpy(out, bytes_.data() + offset, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  std::optional<std::string_view> mapping() const override { return bytes_; }

 private:
  std::string name_;
  std::string_view bytes_;
};

// An object being written: a MultipartWriter (multipart_writer.h) that Close() finishes
// and Commit() completes. With WriteOptions::if_absent (a bundle's index, the commit of a
// checkpoint) it is completed only if no object has that name yet (If-None-Match: *), so a
// run never replaces an index another run wrote meanwhile (--force removes the old one
// first, or replaces it in one PUT without if_absent: PublishBundle).
class S3Upload final : public WritableFile {
 public:
  // `exclusive`: completed only if no object has the name yet.
  S3Upload(std::string name, std::shared_ptr<S3Storage> store, std::shared_ptr<Client> client, ObjectUrl url,
           std::unique_ptr<MultipartWriter> writer, bool exclusive, std::shared_ptr<CopyRefusal> refusal)
      : name_(std::move(name)),
        store_(std::move(store)),
        client_(std::move(client)),
        url_(std::move(url)),
        writer_(std::move(writer)),
        exclusive_(exclusive),
        refusal_(std::move(refusal)) {}

  // The copies become parts the store copies (PlanParts) where every source is an object
  // of this store (its client: same endpoint and credentials), the mode allows and the
  // store has not refused a copy in this run.
  absl::StatusOr<bool> PlanCopies(uint64_t size, const std::vector<PlannedCopy>& copies,
                                  ServerSideCopy mode) override {
    if (mode == ServerSideCopy::kNever || copies.empty()) return false;
    const bool required = mode == ServerSideCopy::kAlways;
    if (url_.scheme != "s3") {
      // Cloud Storage's XML API has no ranged part copy.
      if (required) return absl::FailedPreconditionError(StrCat(name_, ": gs:// has no copy of byte ranges inside the store"));
      return false;
    }
    if (refusal_->refused() && !required) return false;
    std::vector<const S3File*> files;
    std::vector<CopySource> sources;
    std::vector<CopyRun> runs;
    for (const PlannedCopy& c : copies) {
      const auto* f = dynamic_cast<const S3File*>(c.src);
      if (f == nullptr || f->client() != client_.get()) {
        if (required) {
          return absl::FailedPreconditionError(StrCat(name_, ": ", c.src->path(), " is not in the same store"));
        }
        return false;
      }
      auto it = std::find(files.begin(), files.end(), f);
      if (it == files.end()) {
        files.push_back(f);
        sources.push_back({f->url(), f->etag()});
        it = files.end() - 1;
      }
      runs.push_back({c.offset, c.size, static_cast<int>(it - files.begin()), c.src_offset});
    }
    PartLimits limits;
    // A copied part that the store refuses is fetched and sent: at most 64 MiB in memory,
    // unless the object is so large that 10,000 parts need more.
    limits.max_copy_part = std::clamp<uint64_t>(size / 5000, 64ull << 20, kMaxPart);
    absl::StatusOr<std::vector<PlannedPart>> parts = PlanParts(size, std::move(runs), limits);
    if (!parts.ok()) {
      if (required) return Named(parts.status(), name_);
      return false;
    }
    if (parts->empty()) return false;
    writer_->Plan(*std::move(parts), std::move(sources), refusal_, required);
    sources_ = std::move(files);
    return true;
  }

  absl::StatusOr<bool> CopyInStoreAt(uint64_t offset, const ReadableFile& src, uint64_t src_offset,
                                     std::string_view bytes) override {
    if (!writer_->planned()) {
      TFCKPT_RETURN_IF_ERROR(WriteAt(offset, bytes));
      return false;
    }
    bool copied = false;
    while (!bytes.empty()) {
      const PlannedPart& part = writer_->PlannedPartAt(offset);
      const uint64_t take = std::min<uint64_t>(bytes.size(), part.end - offset);
      if (part.copied()) {
        TFCKPT_RETURN_IF_ERROR(CoverPlanned(part, offset, src, src_offset, take));
        copied = true;
      } else {
        TFCKPT_RETURN_IF_ERROR(writer_->WriteAt(offset, bytes.substr(0, take)));
      }
      offset += take;
      src_offset += take;
      bytes.remove_prefix(take);
    }
    return copied;
  }

  std::vector<std::pair<uint64_t, uint64_t>> CopiedInStore(uint64_t offset, uint64_t n) const override {
    std::vector<std::pair<uint64_t, uint64_t>> copied;
    if (!writer_->planned()) return copied;
    for (const uint64_t end = offset + n; offset < end;) {
      const PlannedPart& part = writer_->PlannedPartAt(offset);
      const uint64_t stop = std::min(end, part.end);
      if (part.copied()) {
        if (!copied.empty() && copied.back().second == offset) {
          copied.back().second = stop;
        } else {
          copied.emplace_back(offset, stop);
        }
      }
      offset = stop;
    }
    return copied;
  }

  const std::string& path() const override { return name_; }
  uint64_t size() const override { return writer_->size(); }
  absl::Status Append(std::string_view data) override { return writer_->Append(data); }
  absl::Status WriteAt(uint64_t offset, std::string_view data) override { return writer_->WriteAt(offset, data); }
  absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n) override {
    return CopyAt(writer_->size(), src, src_offset, n);
  }
  // Read and placed in pieces of a part; where PlanCopies planned the range as a copy
  // inside the store, not read at all (a whole data file copied: merge).
  absl::Status CopyAt(uint64_t offset, const ReadableFile& src, uint64_t src_offset, uint64_t n) override {
    if (src_offset > src.size() || n > src.size() - src_offset) return src.PastEndError(src_offset, n);
    std::string buffer;
    for (uint64_t done = 0; done < n;) {
      uint64_t take = std::min<uint64_t>(n - done, kPieceBytes);
      if (writer_->planned()) {
        const PlannedPart& part = writer_->PlannedPartAt(offset + done);
        take = std::min(take, part.end - (offset + done));
        if (part.copied()) {
          take = std::min(n - done, part.end - (offset + done));
          TFCKPT_RETURN_IF_ERROR(CoverPlanned(part, offset + done, src, src_offset + done, take));
          done += take;
          continue;
        }
      }
      buffer.resize(static_cast<size_t>(take));
      TFCKPT_RETURN_IF_ERROR(src.ReadAt(src_offset + done, take, buffer.data()));
      TFCKPT_RETURN_IF_ERROR(writer_->WriteAt(offset + done, buffer));
      done += take;
    }
    return absl::OkStatus();
  }
  // Bytes [offset, offset + n) of the copied `part` will be the store's copy: they must be
  // what the plan copies (a writer that announced other copies has a bug).
  absl::Status CoverPlanned(const PlannedPart& part, uint64_t offset, const ReadableFile& src, uint64_t src_offset,
                            uint64_t n) {
    if (sources_[static_cast<size_t>(part.source)] != &src || part.source_offset + (offset - part.begin) != src_offset) {
      return absl::InternalError(StrCat("bug: ", name_, ": bytes at ", offset, " are not the planned copy of ",
                                        src.path(), " at ", src_offset));
    }
    return Named(writer_->Cover(offset, n), name_);
  }

  // After Commit(), the object; before, its bytes while the writer holds them all (a small
  // object, such as an index); otherwise Unimplemented.
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWritten() override {
    if (committed_) return store_->OpenForRead(name_);
    if (std::optional<std::string_view> whole = writer_->HeldWhole()) {
      return std::unique_ptr<ReadableFile>(new HeldFile(name_, *whole));
    }
    return WritableFile::OpenWritten();
  }
  bool ReadableBeforeCommit() const override { return false; }
  absl::Status Close() override { return Named(writer_->Finish(), name_); }
  // Like a local output renamed into place, the object stays an output of the run until it
  // succeeds (run/run.h): a failure or a stop of the run before that deletes it.
  absl::Status Commit() override {
    TFCKPT_RETURN_IF_ERROR(Reached("upload-completing"));
    delete_work_ = AtUndo([client = client_, url = url_] { DeleteOrNote(*client, url); });
    const absl::Status completed = writer_->Complete(exclusive_);
    store_->Forget(name_);  // (replaced, or in a state unknown after a failure)
    if (!completed.ok()) {
      // Refused (the name is taken, the upload is gone): nothing of this run's is there.
      // Only a completion whose outcome is unknown (its last attempt went unanswered) may
      // have been carried out: then the name is this run's output and deleted on undo.
      if (!CommitMayHaveHappened(completed)) {
        ForgetAtUndo(delete_work_);
        delete_work_ = 0;
      } else if (std::optional<std::string_view> whole = writer_->HeldWhole()) {
        // A small object (an index) whose PUT may or may not have gone up: the undo deletes
        // what is under the name only while it holds these bytes -- not an object put there
        // since, such as the old index that a failed --force puts back (PublishBundle).
        ForgetAtUndo(delete_work_);
        delete_work_ = AtUndo([client = client_, url = url_, bytes = std::string(*whole)] {
          absl::StatusOr<std::optional<std::string>> ours = client->Holds(url, bytes);
          if (!ours.ok() || ours->has_value()) DeleteOrNote(*client, url);
        });
      }
      return Named(completed, name_);
    }
    committed_ = true;
    return Reached("upload-completed");
  }
  void Publish() override {
    ForgetAtUndo(delete_work_);
    delete_work_ = 0;
  }

 private:
  std::string name_;
  std::shared_ptr<S3Storage> store_;
  std::shared_ptr<Client> client_;  // (before writer_: it outlives the writer's requests)
  ObjectUrl url_;
  uint64_t delete_work_ = 0;
  std::unique_ptr<MultipartWriter> writer_;
  bool exclusive_;
  bool committed_ = false;
  std::shared_ptr<CopyRefusal> refusal_;  // the store's, shared by its uploads
  std::vector<const S3File*> sources_;     // PlanCopies: the sources of copied parts
};

// A key as a directory prefix: "" stays "", else it ends in one "/".
std::string DirectoryPrefix(const std::string& key) {
  return key.empty() || key.back() == '/' ? key : key + "/";
}

absl::StatusOr<int> WholeNumberVariable(const EnvLookup& env, std::string_view name, int fallback, int lo, int hi) {
  const std::optional<std::string> v = env(name);
  if (!v.has_value() || v->empty()) return fallback;
  int n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < lo || n > hi) {
    return absl::InvalidArgumentError(StrCat(name, "=", *v, ": not a whole number from ", lo, " to ", hi));
  }
  return n;
}

}  // namespace

absl::StatusOr<StoreOptions> StoreOptionsFromEnv(const EnvLookup& env) {
  StoreOptions o;
  ClientOptions& c = o.client;
  TFCKPT_ASSIGN_OR_RETURN(c.connections, WholeNumberVariable(env, "TFCKPT_S3_CONNECTIONS", c.connections, 1, 256));
  TFCKPT_ASSIGN_OR_RETURN(c.retry.max_retries,
                          WholeNumberVariable(env, "TFCKPT_S3_MAX_RETRIES", c.retry.max_retries, 0, 1000));
  TFCKPT_ASSIGN_OR_RETURN(const int connect_s, WholeNumberVariable(env, "TFCKPT_S3_CONNECT_SECONDS",
                                                                   static_cast<int>(c.connect_timeout_ms / 1000), 1, 300));
  c.connect_timeout_ms = connect_s * 1000L;
  TFCKPT_ASSIGN_OR_RETURN(c.stall_seconds, WholeNumberVariable(env, "TFCKPT_S3_STALL_SECONDS",
                                                               static_cast<int>(c.stall_seconds), 1, 3600));
  TFCKPT_ASSIGN_OR_RETURN(const int kib, WholeNumberVariable(env, "TFCKPT_S3_READ_AHEAD_KIB",
                                                             static_cast<int>(kWindowBytes >> 10), 64, 65536));
  o.window_bytes = static_cast<uint64_t>(kib) << 10;
  return o;
}

S3Storage::S3Storage(int connections)
    : connections_override_(connections),
      cache_(std::make_shared<WindowCache>()),
      scans_(std::make_shared<ScanBudget>()),
      refusal_(std::make_shared<CopyRefusal>()) {}
S3Storage::~S3Storage() = default;



TransferStats S3Storage::Transfers() {
  TransferStats out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [scheme, client] : clients_) {
    if (!client) continue;
    out.copied_in_store += client->bytes_copied();
    out.uploaded += client->bytes_uploaded();
    out.downloaded += client->bytes_downloaded();
  }
  if (std::string note = refusal_->Note(); !note.empty()) out.notes.push_back(std::move(note));
  return out;
}

absl::StatusOr<S3Storage::Target> S3Storage::Resolve(const std::string& path) {
  absl::StatusOr<ObjectUrl> url = ParseObjectUrl(path);
  // A malformed URL names no object: reported as an input that cannot be read.
  if (!url.ok()) return absl::NotFoundError(url.status().message());
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Client>& client = clients_[url->scheme];
  if (!client) {
    // The environment and the run's options as they are now (a run reads them when it first
    // talks to the scheme's store; a later run reads them again).
    const EnvLookup env = ProcessEnv();
    TFCKPT_ASSIGN_OR_RETURN(Settings settings, ResolveSettings(url->scheme, env, CurrentObjectStoreOptions()));
    TFCKPT_ASSIGN_OR_RETURN(StoreOptions options, StoreOptionsFromEnv(env));
    if (connections_override_ > 0) options.client.connections = connections_override_;
    options.client.on_retry_burst = [](const RetryNotice& n) { ReportRetry(n.Line()); };
    TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Client> made, Client::Create(std::move(settings), options.client));
    client = std::move(made);
    window_bytes_ = options.window_bytes;
    connections_ = options.client.connections;
    if (!parts_) parts_ = std::make_shared<PartBudget>(connections_);
    if (!scan_gate_) scan_gate_ = std::make_shared<PartBudget>(connections_);
  }
  return Target{*std::move(url), client, window_bytes_, connections_};
}

absl::StatusOr<ObjectInfo> S3Storage::HeadOnce(const Target& t) {
  const std::string url = t.url.ToString();
  {
    std::lock_guard<std::mutex> lock(heads_mu_);
    auto it = heads_.find(url);
    if (it != heads_.end()) return it->second;
  }
  absl::StatusOr<ObjectInfo> info = t.client->Head(t.url);
  if (info.ok()) {
    std::lock_guard<std::mutex> lock(heads_mu_);
    heads_.emplace(url, *info);
  }
  return info;
}

void S3Storage::Forget(const std::string& url, bool under) {
  absl::StatusOr<ObjectUrl> parsed = ParseObjectUrl(url);
  if (!parsed.ok()) return;
  const std::string key = parsed->ToString();  // (the form HeadOnce keeps)
  std::lock_guard<std::mutex> lock(heads_mu_);
  if (!under) {
    heads_.erase(key);
    return;
  }
  for (auto it = heads_.lower_bound(key); it != heads_.end() && absl::StartsWith(it->first, key);) {
    it = heads_.erase(it);
  }
}

absl::Status S3Storage::CheckAccess(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(path));
  if (t.url.key.empty()) {
    // A bucket: one page of one key (only a listing can say it exists).
    return Named(t.client->ListLevel(t.url, "/", 1, /*first_page_only=*/true).status(), path);
  }
  // The first byte of the key, which needs s3:GetObject alone (many roles, and every public
  // bucket, may read objects and not list them): the endpoint answers, the credentials are
  // accepted and the bucket exists unless the answer says otherwise. A missing key is no
  // error (a prefix names none), and neither is AccessDenied: S3 answers it for a missing
  // key to a caller who may not list the bucket (whether the objects can be read, their
  // reads will say).
  char byte;
  const absl::Status s = t.client->Read(t.url, 0, 1, "", &byte);
  if (s.ok() || absl::IsOutOfRange(s)) return absl::OkStatus();  // (OutOfRange: an empty object)
  const std::string code = S3ErrorCode(s);
  if (absl::IsNotFound(s) && code != "NoSuchBucket") return absl::OkStatus();
  if (absl::IsPermissionDenied(s) && code == "AccessDenied") return absl::OkStatus();
  if (absl::IsInvalidArgument(s) && code.empty()) {
    // A 400 that says nothing (Swift's to an unsigned GET, where the listing this check used
    // to send got 403): the store's answer, not a usage error of the command (exit 3). One
    // with a code stays a usage error: AuthorizationHeaderMalformed names a wrong --region.
    return Named(absl::FailedPreconditionError(s.message()), path);
  }
  return Named(s, path);
}

absl::StatusOr<std::unique_ptr<ReadableFile>> S3Storage::OpenForRead(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(path));
  absl::StatusOr<ObjectInfo> info = HeadOnce(t);
  if (!info.ok()) return Named(info.status(), path);
  return std::unique_ptr<ReadableFile>(
      new S3File(t.client, std::move(t.url), *std::move(info), t.window_bytes, cache_, scan_gate_, scans_, t.connections));
}

absl::StatusOr<std::unique_ptr<WritableFile>> S3Storage::Create(const std::string& final_path,
                                                                const WriteOptions& options) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(final_path));
  if (t.url.key.empty() || t.url.key.back() == '/') {
    return absl::InvalidArgumentError(StrCat(final_path, ": names no object (a key is needed)"));
  }
  auto writer = MultipartWriter::Create(t.client.get(), t.url, options.part_size > 0 ? options.part_size : kPartBytes,
                                        t.connections, parts_);
  return std::unique_ptr<WritableFile>(new S3Upload(final_path, std::static_pointer_cast<S3Storage>(shared_from_this()),
                                                    t.client, t.url, std::move(writer), options.if_absent,
                                                    refusal_));
}

absl::StatusOr<FileStat> S3Storage::Stat(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(path));
  if (!t.url.key.empty() && t.url.key.back() != '/') {
    absl::StatusOr<ObjectInfo> info = HeadOnce(t);
    if (!info.ok() && absl::IsPermissionDenied(info.status())) info = t.client->HeadIfPresent(t.url);
    if (info.ok()) return FileStat{EntryKind::kFile, info->size, 0};
    if (!absl::IsNotFound(info.status())) return Named(info.status(), path);
  }
  const ObjectUrl dir{t.url.scheme, t.url.bucket, DirectoryPrefix(t.url.key)};
  absl::StatusOr<Client::Listing> some = t.client->ListLevel(dir, "/", 1, /*first_page_only=*/true);
  if (!some.ok() && absl::IsPermissionDenied(some.status()) && !t.url.key.empty() && t.url.key.back() != '/') {
    // Not an object that may be read, and the prefix may not be listed: missing, or refused
    // (S3 answers both alike to a caller without s3:ListBucket); a refusal is the error.
    return absl::PermissionDeniedError(StrCat(path, ": no such object, or not allowed to read it; and ",
                                              some.status().message()));
  }
  if (!some.ok()) return Named(some.status(), path);
  if (some->objects.empty() && some->common_prefixes.empty() && !t.url.key.empty()) {
    return absl::NotFoundError(StrCat(path, ": no such object, and no object under ", dir.ToString()));
  }
  return FileStat{EntryKind::kDirectory, 0, 0};
}

std::vector<absl::StatusOr<FileStat>> S3Storage::StatAll(const std::vector<std::string>& paths) {
  std::vector<absl::StatusOr<FileStat>> out(paths.size(), absl::UnknownError("not asked"));
  const absl::StatusOr<Target> first = paths.empty() ? absl::StatusOr<Target>(absl::NotFoundError("")) : Resolve(paths[0]);
  const int at_once = first.ok() ? std::max(1, first->connections) : 1;
  ParallelFor(paths.size(), at_once, [&](size_t i) { out[i] = Stat(paths[i]); });
  return out;
}

bool S3Storage::IsFile(const std::string& path) {
  const absl::StatusOr<Target> t = Resolve(path);
  if (!t.ok() || t->url.key.empty() || t->url.key.back() == '/') return false;
  absl::StatusOr<ObjectInfo> info = HeadOnce(*t);
  if (!info.ok() && absl::IsPermissionDenied(info.status())) info = t->client->HeadIfPresent(t->url);
  return info.ok();
}

absl::StatusOr<std::vector<DirEntry>> S3Storage::List(const std::string& dir) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(dir));
  const ObjectUrl prefix{t.url.scheme, t.url.bucket, DirectoryPrefix(t.url.key)};
  absl::StatusOr<Client::Listing> listing = t.client->ListLevel(prefix, "/");
  if (!listing.ok()) return Named(listing.status(), dir);
  std::vector<DirEntry> out;
  for (const ListedObject& o : listing->objects) {
    const std::string name = o.key.substr(prefix.key.size());
    if (!name.empty()) out.push_back({name, EntryKind::kFile, o.size});  // "KEY/" itself is no entry
  }
  for (const std::string& p : listing->common_prefixes) {
    const std::string name = p.substr(prefix.key.size(), p.size() - prefix.key.size() - 1);
    if (!name.empty()) out.push_back({name, EntryKind::kDirectory, 0});
  }
  if (out.empty() && !prefix.key.empty()) {
    return absl::NotFoundError(StrCat(dir, ": no such directory (no object under ", prefix.ToString(), ")"));
  }
  return out;
}

std::vector<std::string> S3Storage::Glob(const std::string& pattern) {
  auto t = Resolve(pattern);
  if (!t.ok()) return {};
  const ObjectUrl fixed{t->url.scheme, t->url.bucket, t->url.key.substr(0, t->url.key.find_first_of("*?["))};
  auto listed = t->client->List(fixed);
  std::vector<std::string> out;
  for (const ListedObject& o : listed.ok() ? *listed : std::vector<ListedObject>{}) {
    std::string url = ObjectUrl{fixed.scheme, fixed.bucket, o.key}.ToString();
    if (::fnmatch(pattern.c_str(), url.c_str(), FNM_PATHNAME) == 0) out.push_back(std::move(url));
  }
  return out;
}

absl::StatusOr<std::string> S3Storage::ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(path));
  absl::StatusOr<ObjectInfo> info = HeadOnce(t);
  if (!info.ok()) return Named(info.status(), path);
  if (info->size > max_bytes) {
    return absl::FailedPreconditionError(
        StrCat(path, ": ", info->size, " bytes, larger than the ", max_bytes, " bytes expected here"));
  }
  std::string out(static_cast<size_t>(info->size), '\0');
  TFCKPT_RETURN_IF_ERROR(Named(t.client->Read(t.url, 0, out.size(), info->etag, out.data()), path));
  return out;
}

absl::Status S3Storage::Remove(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(path));
  // DELETE answers 204 for a missing key too: ask first, as Remove must say NotFound.
  TFCKPT_RETURN_IF_ERROR(Named(t.client->HeadIfPresent(t.url).status(), path));
  Forget(path);
  return Named(t.client->Delete(t.url), path);
}

absl::Status S3Storage::RemoveAll(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(path));
  Forget(path, /*under=*/true);
  if (!t.url.key.empty() && t.url.key.back() != '/') {
    absl::Status s = t.client->Delete(t.url);
    if (!s.ok() && !absl::IsNotFound(s)) return Named(s, path);
  }
  const ObjectUrl dir{t.url.scheme, t.url.bucket, DirectoryPrefix(t.url.key)};
  absl::StatusOr<std::vector<ListedObject>> under = t.client->List(dir);
  if (!under.ok()) return Named(under.status(), path);
  for (const ListedObject& o : *under) {
    absl::Status s = t.client->Delete({dir.scheme, dir.bucket, o.key});
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> S3Storage::UnfinishedWrites(const std::string& prefix) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(prefix));
  absl::StatusOr<std::vector<MultipartUpload>> uploads = t.client->ListMultipartUploads(t.url);
  if (!uploads.ok()) return Named(uploads.status(), prefix);
  std::vector<std::string> out;
  for (const MultipartUpload& u : *uploads) out.push_back(ObjectUrl{t.url.scheme, t.url.bucket, u.key}.ToString());
  return out;
}

absl::StatusOr<std::vector<std::string>> S3Storage::AbortUnfinishedWrites(const std::string& prefix,
                                                                          int64_t min_age_seconds) {
  TFCKPT_ASSIGN_OR_RETURN(Target t, Resolve(prefix));
  absl::StatusOr<std::vector<MultipartUpload>> uploads = t.client->ListMultipartUploads(t.url);
  if (!uploads.ok()) return Named(uploads.status(), prefix);
  const SystemTime now = std::chrono::system_clock::now();
  std::vector<std::string> out;
  for (const MultipartUpload& u : *uploads) {
    if (min_age_seconds > 0 && !u.initiated.empty()) {
      const absl::StatusOr<SystemTime> started = ParseIso8601(u.initiated);
      if (started.ok() && now - *started < std::chrono::seconds(min_age_seconds)) continue;  // perhaps still written
    }
    const ObjectUrl url{t.url.scheme, t.url.bucket, u.key};
    absl::Status s = t.client->AbortMultipartUpload(url, u.upload_id);
    if (!s.ok() && !absl::IsNotFound(s)) return s;  // NotFound: finished or aborted meanwhile
    out.push_back(url.ToString());
  }
  return out;
}

absl::Status S3Storage::CreateDirectories(const std::string& /*dir*/) { return absl::OkStatus(); }

absl::Status S3Storage::Move(const std::string& from, const std::string& to) {
  return absl::UnimplementedError(
      StrCat(to, ": an object store cannot rename ", from, " (there is no atomic rename; copy instead)"));
}

absl::Status S3Storage::Link(const std::string& from, const std::string& to) {
  return absl::UnimplementedError(StrCat(to, ": an object store cannot link ", from));
}

std::string S3Storage::Absolute(const std::string& path) { return path; }

absl::Status S3Storage::CheckNotInputs(const std::vector<std::string>& outputs,
                                       const std::vector<std::string>& inputs) {
  for (const std::string& out : outputs) {
    if (std::find(inputs.begin(), inputs.end(), out) != inputs.end()) {
      return absl::InvalidArgumentError(StrCat(out, ": is one of the inputs; write the output elsewhere"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> S3Storage::RemoveStaleTemporaries(const std::string& /*dir*/, const std::string& /*stem*/) {
  return {};  // an object store has no temporary names: an unfinished write is an upload in progress
}

}  // namespace tfckpt::s3
