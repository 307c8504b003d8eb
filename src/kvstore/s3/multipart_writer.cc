#include "kvstore/s3/multipart_writer.h"

#include "tfckpt/storage.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/strip.h"
#include "kvstore/s3/part_plan.h"
#include "kvstore/s3/sigv4.h"
#include "run/run.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {

int PartLayout::PartOf(uint64_t offset) const {
  int k = 0;
  uint64_t size = first_;
  uint64_t tier_begin = 0;
  // Tiers double in size: at most a few dozen steps for any 64-bit offset.
  while (offset - tier_begin >= size * kPartsPerTier) {
    tier_begin += size * kPartsPerTier;
    size *= 2;
    k += kPartsPerTier;
  }
  return k + static_cast<int>((offset - tier_begin) / size);
}

uint64_t PartLayout::Begin(int k) const {
  uint64_t at = 0, size = first_;
  for (; k >= kPartsPerTier; k -= kPartsPerTier, size *= 2) at += size * kPartsPerTier;
  return at + static_cast<uint64_t>(k) * size;
}

void CopyRefusal::Refuse(const absl::Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (refused_.exchange(true)) return;
  // "HTTP 501 NotImplemented" of "PUT s3://b/k: HTTP 501 NotImplemented: ..." (the store's
  // words, never a credential: the URLs are the run's own).
  std::string_view m(s.message().data(), s.message().size());
  const size_t at = m.find("HTTP ");
  if (at != std::string_view::npos) {
    m.remove_prefix(at);
    m = m.substr(0, m.find(':'));
  }
  answer_ = std::string(m);
}

std::string CopyRefusal::Note() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!refused_) return "";
  return StrCat("the store refused a server-side copy (", answer_, "): copying through this machine");
}

bool RefusesCopies(const absl::Status& s) {
  return absl::IsUnimplemented(s) || (absl::IsPermissionDenied(s) && S3ErrorCode(s) == "AccessDenied");
}

int MultipartWriter::PartOf(uint64_t offset) const {
  if (plan_.empty()) return layout_.PartOf(offset);
  const auto it = std::upper_bound(plan_.begin(), plan_.end(), offset,
                                   [](uint64_t at, const PlannedPart& p) { return at < p.begin; });
  return static_cast<int>(it - plan_.begin()) - 1;
}

void MultipartWriter::Plan(std::vector<PlannedPart> parts, std::vector<CopySource> sources,
                           std::shared_ptr<CopyRefusal> refusal, bool required) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(parts);
  sources_ = std::move(sources);
  refusal_ = std::move(refusal);
  copies_required_ = required;
}

absl::Status MultipartWriter::Cover(uint64_t offset, uint64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  while (n > 0) {
    TFCKPT_RETURN_IF_ERROR(status_);
    if (finished_) return absl::FailedPreconditionError(StrCat(url_string_, ": write after the last part"));
    const int k = PartOf(offset);
    const PlannedPart& part = plan_[static_cast<size_t>(k)];
    if (!part.copied() || offset + n < offset) {
      return absl::InternalError(StrCat("bug: ", url_string_, ": bytes at ", offset, " are not planned as a copy"));
    }
    const uint64_t take = std::min(n, part.end - offset);
    uint64_t& covered = covered_[k];
    covered += take;
    size_ = std::max(size_, offset + take);
    offset += take;
    n -= take;
    if (covered == part.end - part.begin) {
      covered_.erase(k);
      TFCKPT_RETURN_IF_ERROR(SendCopy(lock, k));
    }
  }
  return absl::OkStatus();
}

absl::Status MultipartWriter::SendCopy(std::unique_lock<std::mutex>& lock, int k) {
  TFCKPT_RETURN_IF_ERROR(EnsureUpload(lock));
  cv_.wait(lock, [&] { return sending_ < in_flight_ || !status_.ok(); });
  TFCKPT_RETURN_IF_ERROR(status_);
  ++sending_;
  threads_.push_back(StartThread([this, k, id = upload_id_] {
    PartDone(k, CopyPart(id, k));
  }));
  return absl::OkStatus();
}

absl::StatusOr<std::string> MultipartWriter::CopyPart(const std::string& upload_id, int k) {
  const PlannedPart& part = plan_[static_cast<size_t>(k)];
  const CopySource& src = sources_[static_cast<size_t>(part.source)];
  const uint64_t size = part.end - part.begin;
  if (!refusal_->refused()) {
    absl::StatusOr<std::string> etag =
        client_->UploadPartCopy(url_, upload_id, k + 1, src.url, src.etag, part.source_offset, size);
    if (absl::IsFailedPrecondition(etag.status()) && !src.etag.empty()) {
      // 412 to x-amz-copy-source-if-match: the source was replaced, or the store compares a
      // multipart source's ETag otherwise than its HEAD gives it (Swift answers 412 to the
      // ETag its own HEAD gives an object assembled from parts). HEAD tells which: the same
      // ETag, and the part is copied without the condition (the run's verification proves
      // the copies against the input's CRCs before anything is committed); another, and
      // the input changed under the run.
      absl::StatusOr<ObjectInfo> now = client_->Head(src.url);
      if (!now.ok()) return now.status();
      if (now->etag != src.etag) {
        return absl::FailedPreconditionError(StrCat(src.url.ToString(), ": replaced while it was being copied (ETag ",
                                                    src.etag, ", now ", now->etag, ")"));
      }
      etag = client_->UploadPartCopy(url_, upload_id, k + 1, src.url, "", part.source_offset, size);
    }
    if (etag.ok()) {
      TFCKPT_RETURN_IF_ERROR(Reached("part-copied"));
      return etag;
    }
    if (copies_required_ || !RefusesCopies(etag.status())) return etag.status();
    refusal_->Refuse(etag.status());
  }
  // The store does not copy: the part's bytes are fetched and sent (as one part in memory,
  // counted among the parts on their way).
  if (shared_) shared_->Acquire();
  std::string body(static_cast<size_t>(size), '\0');
  absl::Status got = client_->Read(src.url, part.source_offset, size, src.etag, body.data());
  absl::StatusOr<std::string> etag = got.ok() ? client_->UploadPart(url_, upload_id, k + 1, body) : got;
  if (shared_) shared_->Release();
  if (etag.ok()) TFCKPT_RETURN_IF_ERROR(Reached("part-uploaded"));
  return etag;
}

std::unique_ptr<MultipartWriter> MultipartWriter::Create(Client* client, ObjectUrl url, uint64_t part_size,
                                                         int in_flight, std::shared_ptr<PartBudget> shared) {
  return std::unique_ptr<MultipartWriter>(
      new MultipartWriter(client, std::move(url), part_size, std::max(in_flight, 1), std::move(shared)));
}

MultipartWriter::~MultipartWriter() {
  if (!completed_) Abort();
}

uint64_t MultipartWriter::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

absl::Status MultipartWriter::WriteAt(uint64_t offset, std::string_view data) {
  while (!data.empty()) {
    const int k = PartOf(offset);
    const uint64_t begin = Begin(k), end = End(k);
    const size_t take = static_cast<size_t>(std::min<uint64_t>(data.size(), end - offset));
    char* dst;
    {
      std::lock_guard<std::mutex> lock(mu_);
      TFCKPT_RETURN_IF_ERROR(status_);
      if (finished_) return absl::FailedPreconditionError(StrCat(url_string_, ": write after the last part"));
      if (!plan_.empty() && plan_[static_cast<size_t>(k)].copied()) {
        return absl::InternalError(StrCat("bug: ", url_string_, ": bytes written at ", offset,
                                          ", in a part planned as a copy"));
      }
      Held& h = held_[k];  // (map nodes stay put: the copy below runs unlocked)
      if (h.bytes.empty()) h.bytes.resize(end - begin);
      dst = h.bytes.data() + (offset - begin);
    }
    std::memcpy(dst, data.data(), take);
    std::unique_lock<std::mutex> lock(mu_);
    Held& h = held_[k];
    h.filled += take;
    size_ = std::max<uint64_t>(size_, offset + take);
    if (h.filled == end - begin) {
      std::string bytes = std::move(h.bytes);
      held_.erase(k);
      TFCKPT_RETURN_IF_ERROR(Send(lock, k, std::move(bytes)));
    }
    offset += take;
    data.remove_prefix(take);
  }
  return absl::OkStatus();
}

absl::Status MultipartWriter::EnsureUpload(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return !creating_; });
  if (!upload_id_.empty() || !status_.ok()) return status_;
  creating_ = true;
  lock.unlock();
  // A run that fails or is stopped leaves no upload in progress (run/run.h). Until the
  // upload's id is known, a stop that cuts the request short (the server may create the
  // upload all the same) aborts every upload in progress under this object's name: the
  // name is the run's output, so they are its own (or older leftovers).
  const uint64_t unnamed = AtUndo(
      [client = client_, url = url_] {
        absl::StatusOr<std::vector<MultipartUpload>> all = client->ListMultipartUploads(url);
        for (const MultipartUpload& u : all.ok() ? *all : std::vector<MultipartUpload>{}) {
          if (u.key == url.key) client->AbortMultipartUpload(url, u.upload_id).IgnoreError();
        }
      },
      UndoOrder::kIndependent);
  absl::StatusOr<std::string> id = client_->CreateMultipartUpload(url_);
  absl::Status reached;
  if (id.ok()) {
    undo_ = AtUndo([client = client_, url = url_, id = *id] { client->AbortMultipartUpload(url, id).IgnoreError(); },
                   UndoOrder::kIndependent);
    ForgetAtUndo(unnamed);
    reached = Reached("upload-created");
  } else if (!absl::IsCancelled(id.status())) {
    ForgetAtUndo(unnamed);  // (refused: nothing was created)
  }
  lock.lock();
  creating_ = false;
  if (id.ok()) {
    upload_id_ = *std::move(id);
    if (status_.ok()) status_ = reached;
  } else if (status_.ok()) {
    status_ = id.status();
  }
  cv_.notify_all();
  return status_;
}

absl::Status MultipartWriter::Send(std::unique_lock<std::mutex>& lock, int k, std::string bytes) {
  TFCKPT_RETURN_IF_ERROR(EnsureUpload(lock));
  cv_.wait(lock, [&] { return sending_ < in_flight_ || !status_.ok(); });
  TFCKPT_RETURN_IF_ERROR(status_);
  ++sending_;  // (counted before the shared wait: Finish waits for this part too)
  if (shared_) {
    lock.unlock();
    shared_->Acquire();
    lock.lock();
  }
  auto body = std::make_shared<std::string>(std::move(bytes));
  threads_.push_back(StartThread([this, k, body, id = upload_id_] {
    absl::StatusOr<std::string> etag = client_->UploadPart(url_, id, k + 1, *body);
    if (shared_) shared_->Release();
    if (etag.ok()) {
      if (absl::Status s = Reached("part-uploaded"); !s.ok()) etag = s;
    }
    PartDone(k, std::move(etag));
  }));
  return absl::OkStatus();
}

void MultipartWriter::PartDone(int k, absl::StatusOr<std::string> etag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (etag.ok()) {
    etags_[k] = *std::move(etag);
  } else if (status_.ok()) {
    status_ = etag.status();
  }
  --sending_;
  cv_.notify_all();
}

void MultipartWriter::WaitForAll(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return sending_ == 0 && !creating_; });
  // Every part's thread has left its last step under the lock: joined here, so that none
  // outlives the writer (or the run: no thread of the library is left running at exit).
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

absl::Status MultipartWriter::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  if (finished_) return absl::FailedPreconditionError(StrCat(url_string_, ": finished twice"));
  finished_ = true;
  if (status_.ok() && !plan_.empty()) {
    // Every part of a plan goes once it is whole: all must have gone.
    if (!held_.empty() || !covered_.empty() || size_ != plan_.back().end) {
      const uint64_t begin = !held_.empty()    ? Begin(held_.begin()->first)
                             : !covered_.empty() ? Begin(covered_.begin()->first)
                                                 : size_;
      status_ = absl::InternalError(StrCat("bug: ", url_string_, ": the bytes of the part at ", begin,
                                           " were not all written"));
    }
  } else if (status_.ok()) {
    const int last = size_ == 0 ? 0 : PartOf(size_ - 1);
    for (auto& [k, h] : held_) {
      const uint64_t begin = Begin(k);
      const uint64_t end = k == last ? size_ : End(k);
      if (h.filled != end - begin) {
        status_ = absl::InternalError(StrCat("bug: ", url_string_, ": bytes ", begin, " to ", end,
                                             " were not all written (", h.filled, " of ", end - begin, ")"));
        break;
      }
    }
    // A small object stays held for one PUT; otherwise the last part goes up now.
    if (status_.ok() && !held_.empty() && (last != 0 || !etags_.empty() || sending_ > 0)) {
      std::string bytes = std::move(held_[last].bytes);
      bytes.resize(size_ - Begin(last));
      held_.erase(last);
      // (Send may let go of the lock -- waiting for the upload's creation, a slot, the
      // shared budget --, and a part that fails meanwhile sets status_: that failure stays.
      // Assigning Send's OK over it completed an upload without the failed part.)
      absl::Status sent = Send(lock, last, std::move(bytes));
      if (status_.ok()) status_ = std::move(sent);
    }
  }
  WaitForAll(lock);
  return status_;
}

std::optional<std::string_view> MultipartWriter::HeldWhole() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!upload_id_.empty() || creating_ || !plan_.empty()) return std::nullopt;
  if (held_.empty()) return size_ == 0 ? std::optional<std::string_view>(std::string_view()) : std::nullopt;
  const Held& h = held_.begin()->second;
  if (held_.size() != 1 || held_.begin()->first != 0 || h.filled != size_) return std::nullopt;
  return std::string_view(h.bytes.data(), size_);
}

absl::Status MultipartWriter::Complete(bool if_absent) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!finished_ || !status_.ok()) return absl::FailedPreconditionError(StrCat(url_string_, ": not finished"));
  if (completed_) return absl::FailedPreconditionError(StrCat(url_string_, ": completed twice"));
  absl::Status s;
  if (upload_id_.empty()) {
    std::string_view body;
    if (!held_.empty()) body = std::string_view(held_.begin()->second.bytes.data(), size_);
    lock.unlock();
    s = client_->Put(url_, body, if_absent).status();
    if (CommitMayHaveHappened(s)) {
      // Cut off, or answered 5xx: no object under the name says the PUT was not carried out;
      // one with this body's MD5 as its ETag, that it was. (Another ETag: the old object,
      // or ours under encryption that does not use MD5 -- not known.)
      absl::StatusOr<ObjectInfo> there = client_->HeadIfPresent(url_);
      if (absl::IsNotFound(there.status())) {
        s = CommitNotCarriedOut(std::move(s));
      } else if (there.ok() && absl::StripPrefix(absl::StripSuffix(there->etag, "\""), "\"") == Md5Hex(body)) {
        s = absl::OkStatus();
      }
    }
    lock.lock();
  } else {
    std::vector<CompletedPart> parts;
    for (const auto& [k, etag] : etags_) parts.push_back({k + 1, etag});
    // Every part of the object must be there, 1 to N without a gap: a completion of fewer
    // parts would commit a shorter object (what a lost part failure once did).
    const int want = size_ == 0 ? 0 : PartOf(size_ - 1) + 1;
    if (static_cast<int>(parts.size()) != want || (!parts.empty() && parts.back().number != want)) {
      return absl::InternalError(StrCat("bug: ", url_string_, ": ", parts.size(), " parts uploaded of ", want,
                                        "; not completed"));
    }
    lock.unlock();
    if (if_absent) {
      // No conditional completion everywhere: ask first (a race with another writer
      // remains, as with the HEAD fallback of a PUT).
      absl::StatusOr<ObjectInfo> there = client_->HeadIfPresent(url_);
      if (there.ok()) {
        s = absl::AlreadyExistsError(StrCat(url_string_, ": already exists"));
      } else if (!absl::IsNotFound(there.status())) {
        s = there.status();
      }
    }
    if (s.ok()) s = client_->CompleteMultipartUpload(url_, upload_id_, parts);
    if (CommitMayHaveHappened(s)) {
      // Cut off, or answered 5xx: the upload still in progress says the completion was not
      // carried out (the name is as it was); gone, that it was.
      absl::StatusOr<bool> pending = client_->UploadInProgress(url_, upload_id_);
      if (pending.ok()) s = *pending ? CommitNotCarriedOut(std::move(s)) : absl::OkStatus();
    }
    lock.lock();
  }
  if (s.ok()) {
    completed_ = true;
    held_.clear();
    ForgetAtUndo(undo_);
  }
  return s;
}

absl::Status MultipartWriter::Close() {
  absl::Status s = Finish();
  if (s.ok()) s = Complete();
  if (!s.ok()) Abort();
  return s;
}

void MultipartWriter::Abort() {
  std::unique_lock<std::mutex> lock(mu_);
  WaitForAll(lock);  // every part's body must outlive its request
  finished_ = true;
  if (upload_id_.empty() || completed_) return;
  const std::string id = upload_id_;
  upload_id_.clear();
  lock.unlock();
  NotCancellable clean_up;  // (also when a stop is why the writer is abandoned)
  client_->AbortMultipartUpload(url_, id).IgnoreError();  // best effort: the caller has the news
  ForgetAtUndo(undo_);
}

}  // namespace tfckpt::s3
