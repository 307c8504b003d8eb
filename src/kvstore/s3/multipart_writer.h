// Writes one object as a multipart upload while its bytes arrive, in order (Append) or at
// offsets known in advance (WriteAt, from several threads at once), with bounded memory.
//
// The object is cut into parts at fixed offsets (PartLayout): a part goes up in the
// background as soon as every byte of it is there, at most `in_flight` parts at once (a
// writer that fills one more waits for the oldest). Only parts being filled or sent are
// held, so memory stays near (in_flight + parts being filled) * part size.
//
// Nothing is visible under the object's key until Complete(). An object that fits in its
// first part is sent whole by one PUT at Complete() (no upload is ever created for it); a
// writer destroyed before Complete() aborts its upload, and so does the undoing of the run
// it works for (run/run.h: a run that fails or is stopped).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/s3/client.h"
#include "kvstore/s3/part_plan.h"

namespace tfckpt::s3 {

// Where parts begin. Parts 1..kPartsPerTier are `first` bytes each, the next kPartsPerTier
// twice that, and so on: objects of any size up to S3's 10,000 parts stay within the limit
// (8 MiB first parts reach 16 GiB in the first tier and 496 GiB in five), while objects of
// ordinary size keep small parts (memory). REQUIRES: first >= 5 MiB for S3.
class PartLayout {
 public:
  static constexpr int kPartsPerTier = 2000;
  explicit PartLayout(uint64_t first) : first_(first) {}
  // The 0-based part holding byte `offset`, and where part `k` begins and ends.
  int PartOf(uint64_t offset) const;
  uint64_t Begin(int k) const;
  uint64_t End(int k) const { return Begin(k + 1); }

 private:
  uint64_t first_;
};

// A limit on parts on their way shared by several writers (memory: each holds a part).
class PartBudget {
 public:
  explicit PartBudget(int parts) : free_(std::max(parts, 1)) {}
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    ++free_;
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

// Where the copied parts of an upload (MultipartWriter::Plan) come from: an object of the
// same store, pinned to the ETag it had when it was opened.
struct CopySource {
  ObjectUrl url;
  std::string etag;
};

// What the uploads of one run share about copies inside the store: whether the store refused
// one (then every copy is fetched and sent instead) and what it answered.
class CopyRefusal {
 public:
  bool refused() const { return refused_.load(); }
  // Records the store's refusal `s` (the first one is what the note says).
  void Refuse(const absl::Status& s);
  // The note for the run, or "" when the store refused nothing.
  std::string Note() const;

 private:
  std::atomic<bool> refused_{false};
  mutable std::mutex mu_;
  std::string answer_;
};

// Whether `s`, the failure of an UploadPartCopy, is the store refusing such copies (501
// NotImplemented, or 403 AccessDenied), rather than a failure of this copy.
bool RefusesCopies(const absl::Status& s);

class MultipartWriter {
 public:
  // No request yet: the upload is created when the first part is full. REQUIRES: `client`
  // outlives the writer; part_size >= 5 MiB (S3's minimum for all but the last part, else
  // Complete() fails with EntityTooSmall). in_flight below 1 counts as 1. With `shared`,
  // a part also takes one of its places while it is sent.
  static std::unique_ptr<MultipartWriter> Create(Client* client, ObjectUrl url, uint64_t part_size, int in_flight,
                                                 std::shared_ptr<PartBudget> shared = nullptr);
  ~MultipartWriter();
  MultipartWriter(const MultipartWriter&) = delete;
  MultipartWriter& operator=(const MultipartWriter&) = delete;

  // Places `data` at `offset`. Thread-safe. REQUIRES: ranges of different calls do not
  // overlap; before Finish(). After an error every call returns it.
  absl::Status WriteAt(uint64_t offset, std::string_view data);
  // WriteAt(size()). REQUIRES: no WriteAt at the same time.
  absl::Status Append(std::string_view data) { return WriteAt(size(), data); }

  // Lays the object out as `parts` (PlanParts: they tile [0, size)), the copied ones from
  // `sources`: their bytes are never written here; each is copied inside the store once
  // Cover has covered every byte of it (where the store refuses copies, `refusal` says so,
  // and unless `required` the part is fetched and sent instead). REQUIRES: before any
  // write; parts not empty.
  void Plan(std::vector<PlannedPart> parts, std::vector<CopySource> sources, std::shared_ptr<CopyRefusal> refusal,
            bool required);
  bool planned() const { return !plan_.empty(); }
  // The planned part holding byte `offset` (REQUIRES: planned(), offset < the object's size).
  const PlannedPart& PlannedPartAt(uint64_t offset) const { return plan_[static_cast<size_t>(PartOf(offset))]; }
  // Bytes [offset, offset + n) of copied parts will be the store's copy (the caller checked
  // that they are what the plan copies). Thread-safe. REQUIRES: planned(); the range lies
  // in copied parts; not covered before.
  absl::Status Cover(uint64_t offset, uint64_t n);

  // Sends what is held (the last part) and waits for every part: the object is then
  // ready to be completed. Internal error when a byte before the end was never written.
  // REQUIRES: called at most once, with no write under way.
  absl::Status Finish();
  // Makes the object visible: CompleteMultipartUpload, or the one PUT of a small object.
  // With `if_absent` it must not exist yet (If-None-Match: *, or a HEAD where the server
  // does not support that): AlreadyExists. REQUIRES: Finish() succeeded; at most once.
  absl::Status Complete(bool if_absent = false);
  // Finish(), then Complete(); on an error the upload is aborted.
  absl::Status Close();

  // The object's bytes while all of them are still held (nothing sent: the object fits in
  // its first part, after Finish() or before its first part is full); nullopt otherwise.
  // REQUIRES: no write under way.
  std::optional<std::string_view> HeldWhole() const;

  uint64_t size() const;
  const std::string& url() const { return url_string_; }

 private:
  MultipartWriter(Client* client, ObjectUrl url, uint64_t part_size, int in_flight,
                  std::shared_ptr<PartBudget> shared)
      : client_(client), url_(std::move(url)), url_string_(url_.ToString()), layout_(part_size),
        in_flight_(in_flight), shared_(std::move(shared)) {}
  // Sends part `k` (its bytes moved out of held_) in the background, first waiting while
  // in_flight_ parts are on their way. REQUIRES: lock held (released while waiting).
  absl::Status Send(std::unique_lock<std::mutex>& lock, int k, std::string bytes);
  // The end of part `k`'s request (on its thread): its ETag kept, or the first error.
  void PartDone(int k, absl::StatusOr<std::string> etag);
  // Copies part `k` (planned as a copy) inside the store in the background, like Send.
  absl::Status SendCopy(std::unique_lock<std::mutex>& lock, int k);
  // Part `k` copied inside the store, or fetched and sent where the store refuses copies.
  absl::StatusOr<std::string> CopyPart(const std::string& upload_id, int k);
  absl::Status EnsureUpload(std::unique_lock<std::mutex>& lock);
  // The part holding byte `offset`, and where part `k` begins and ends: the plan's, else
  // layout_'s.
  int PartOf(uint64_t offset) const;
  uint64_t Begin(int k) const { return plan_.empty() ? layout_.Begin(k) : plan_[static_cast<size_t>(k)].begin; }
  uint64_t End(int k) const { return plan_.empty() ? layout_.End(k) : plan_[static_cast<size_t>(k)].end; }
  void WaitForAll(std::unique_lock<std::mutex>& lock);
  void Abort();

  Client* client_;
  ObjectUrl url_;
  std::string url_string_;
  PartLayout layout_;
  int in_flight_;
  std::shared_ptr<PartBudget> shared_;
  // Plan(): the parts, the sources of the copied ones, and the bytes of each copied part
  // covered so far.
  std::vector<PlannedPart> plan_;
  std::vector<CopySource> sources_;
  std::shared_ptr<CopyRefusal> refusal_;
  bool copies_required_ = false;

  mutable std::mutex mu_;
  std::map<int, uint64_t> covered_;  // copied parts not yet complete: bytes covered
  std::condition_variable cv_;
  struct Held {
    std::string bytes;
    uint64_t filled = 0;
  };
  std::map<int, Held> held_;       // parts being filled, by 0-based number
  uint64_t size_ = 0;              // where the furthest write ends
  std::string upload_id_;          // once created
  bool creating_ = false;          // a thread is creating the upload
  int sending_ = 0;                // parts on their way
  std::map<int, std::string> etags_;  // parts sent, by 0-based number
  absl::Status status_;
  bool finished_ = false, completed_ = false;
  uint64_t undo_ = 0;  // aborts the upload when the run is undone (AtUndo)
  std::vector<std::thread> threads_;  // the parts' uploads: joined by WaitForAll
};

}  // namespace tfckpt::s3
