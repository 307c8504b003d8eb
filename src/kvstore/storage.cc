// The parts of storage.h that every implementation shares, and the choice of one.
#include "tfckpt/storage.h"

#include "absl/strings/cord.h"

#include <map>
#include <mutex>

#include "kvstore/local/local_storage.h"
#include "kvstore/memory/memory_storage.h"
#include "kvstore/s3/s3_storage.h"
#include "run/run.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

const std::vector<std::string>& ServerSideWords() {
  static const auto* words = new std::vector<std::string>{"auto", "never", "always"};
  return *words;
}

absl::StatusOr<ServerSideCopy> ParseServerSide(std::string_view mode) {
  TFCKPT_ASSIGN_OR_RETURN(const size_t i, OneOf(mode, ServerSideWords()));
  return static_cast<ServerSideCopy>(i);
}

std::string_view ServerSideName(ServerSideCopy mode) { return ServerSideWords().at(static_cast<size_t>(mode)); }

absl::Status ReadableFile::PastEndError(uint64_t offset, uint64_t n) const {
  return absl::DataLossError(StrCat(path(), ": offset ", offset, ": range of ", n,
                                    " bytes ends past the end of the file (", size(), " bytes)"));
}

absl::StatusOr<std::string_view> ReadableFile::Range(uint64_t offset, uint64_t n, std::string* scratch) const {
  const uint64_t total = size();
  if (offset > total || n > total - offset) return PastEndError(offset, n);
  if (const std::optional<std::string_view> all = mapping()) {
    TFCKPT_RETURN_IF_ERROR(CheckMapped(*this, offset, n));
    return all->substr(offset, n);
  }
  scratch->resize(static_cast<size_t>(n));
  TFCKPT_RETURN_IF_ERROR(ReadAt(offset, n, scratch->data()));
  return std::string_view(*scratch);
}

bool Storage::IsDirectory(const std::string& path) {
  auto s = Stat(path);
  return s.ok() && s->kind == EntryKind::kDirectory;
}

std::vector<absl::StatusOr<FileStat>> Storage::StatAll(const std::vector<std::string>& paths) {
  std::vector<absl::StatusOr<FileStat>> out;
  out.reserve(paths.size());
  for (const std::string& p : paths) out.push_back(Stat(p));
  return out;
}

bool Storage::IsFile(const std::string& path) {
  auto s = Stat(path);
  return s.ok() && s->kind == EntryKind::kFile;
}

absl::Status Storage::CreateParentDirectories(const std::string& path) {
  const std::string dir = Dirname(path);
  return dir.empty() ? absl::OkStatus() : CreateDirectories(dir);
}

namespace {

class RenamedFile final : public ReadableFile {
 public:
  RenamedFile(std::unique_ptr<ReadableFile> file, std::string name) : file_(std::move(file)), name_(std::move(name)) {}
  const std::string& path() const override { return name_; }
  uint64_t size() const override { return file_->size(); }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (offset > size() || n > size() - offset) return PastEndError(offset, n);
    return file_->ReadAt(offset, n, out);  // a failure of the medium names the file it read
  }
  std::optional<std::string_view> mapping() const override { return file_->mapping(); }
  const ReadableFile& file() const { return *file_; }
  void Release(uint64_t offset, uint64_t n) const override { file_->Release(offset, n); }
  void WillReadSequentially(uint64_t offset, uint64_t n) const override { file_->WillReadSequentially(offset, n); }
  void AdviseLayout(const std::vector<std::pair<uint64_t, uint64_t>>& pieces) override { file_->AdviseLayout(pieces); }

 private:
  std::unique_ptr<ReadableFile> file_;
  std::string name_;
};

}  // namespace

namespace {
// The local file `f` is (also under another name), or nullptr.
const LocalReadableFile* AsLocal(const ReadableFile& f) {
  if (const auto* renamed = dynamic_cast<const RenamedFile*>(&f)) return AsLocal(renamed->file());
  return dynamic_cast<const LocalReadableFile*>(&f);
}
}  // namespace

absl::Status CheckMapped(const ReadableFile& f, uint64_t offset, uint64_t n) {
  const LocalReadableFile* local = AsLocal(f);
  return local == nullptr ? absl::OkStatus() : local->CheckMapped(offset, n);
}

absl::StatusOr<std::shared_ptr<char>> MapPrivate(const ReadableFile& f, uint64_t offset, uint64_t n) {
  const LocalReadableFile* local = AsLocal(f);
  if (local == nullptr) return std::shared_ptr<char>();
  return local->MapPrivate(offset, n);
}

std::unique_ptr<ReadableFile> Renamed(std::unique_ptr<ReadableFile> file, std::string name) {
  return std::make_unique<RenamedFile>(std::move(file), std::move(name));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> OpenFile(const std::string& path, const FileOpener* opener) {
  if (opener != nullptr && *opener) return (*opener)(path);
  return Storage::For(path).OpenForRead(path);
}

Storage& Storage::Local() {
  static auto* local = new std::shared_ptr<LocalStorage>(std::make_shared<LocalStorage>());  // never destroyed
  return **local;
}

namespace {

// What a path with a scheme no store serves resolves to, and the store a hermetic run is
// given (NewRefusingStorage): every call is an error naming the path, without a request.
class NoStore final : public Storage {
 public:
  explicit NoStore(absl::StatusCode code = absl::StatusCode::kNotFound,
                   std::string why = "no store for this scheme (local paths, s3://, gs:// and mem:// are served)")
      : code_(code), why_(std::move(why)) {}
  using Storage::Create;
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenForRead(const std::string& p) override { return Refused(p); }
  absl::StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& p, const WriteOptions&) override {
    return Refused(p);
  }
  absl::StatusOr<std::vector<DirEntry>> List(const std::string& p) override { return Refused(p); }
  std::vector<std::string> Glob(const std::string&) override { return {}; }
  absl::StatusOr<FileStat> Stat(const std::string& p) override { return Refused(p); }
  absl::StatusOr<std::string> ReadSmallFile(const std::string& p, uint64_t) override { return Refused(p); }
  absl::Status Remove(const std::string& p) override { return Refused(p); }
  absl::Status RemoveAll(const std::string& p) override { return Refused(p); }
  absl::Status CreateDirectories(const std::string& p) override { return Refused(p); }
  absl::Status Move(const std::string& p, const std::string&) override { return Refused(p); }
  absl::Status Link(const std::string& p, const std::string&) override { return Refused(p); }
  std::string Absolute(const std::string& p) override { return p; }
  absl::Status CheckNotInputs(const std::vector<std::string>&, const std::vector<std::string>&) override {
    return absl::OkStatus();
  }
  absl::Status CheckAccess(const std::string& p) override { return Refused(p); }
  std::vector<std::string> RemoveStaleTemporaries(const std::string&, const std::string&) override { return {}; }

 private:
  absl::Status Refused(const std::string& path) const { return absl::Status(code_, StrCat(path, ": ", why_)); }

  const absl::StatusCode code_;
  const std::string why_;
};

// The stores, by the scheme of the paths they hold (the one table where a store registers);
// made per run (Storage::For), one per `kind`: s3:// and gs:// share one object store.
struct Driver {
  std::string_view scheme;
  const char* kind;
  std::shared_ptr<Storage> (*make)();
};
std::shared_ptr<Storage> MakeObjectStore() {
  const Run* run = CurrentRun();
  return std::make_shared<s3::S3Storage>(run != nullptr ? run->connections() : 0);
}
std::shared_ptr<Storage> MakeMemoryStore() { return MemoryStorage::Instance(); }
std::shared_ptr<Storage> MakeNoStore() { return std::make_shared<NoStore>(); }
constexpr char kObjectStore[] = "object store", kMemoryStore[] = "memory", kNoStoreKind[] = "none";
constexpr Driver kDrivers[] = {
    {"s3", kObjectStore, MakeObjectStore}, {"gs", kObjectStore, MakeObjectStore}, {"mem", kMemoryStore, MakeMemoryStore}};
constexpr Driver kNoStore = {"", kNoStoreKind, MakeNoStore};

const Driver& DriverFor(std::string_view path) {
  const std::string_view scheme = path.substr(0, path.find("://"));
  for (const Driver& d : kDrivers) {
    if (d.scheme == scheme) return d;
  }
  return kNoStore;
}

}  // namespace

std::shared_ptr<Storage> NewMemoryStorage() { return std::make_shared<MemoryStorage>(); }

std::shared_ptr<Storage> NewRefusingStorage() {
  return std::make_shared<NoStore>(absl::StatusCode::kFailedPrecondition, "this run refuses the store of this scheme");
}

Storage& Storage::For(std::string_view path) {
  if (!IsUrl(path)) return Local();
  const Driver& driver = DriverFor(path);
  if (Run* run = CurrentRun()) {
    if (const std::shared_ptr<Storage> given = run->GivenStore(path.substr(0, path.find("://")))) return *given;
    return *static_cast<Storage*>(
        run->Resource(driver.kind, [&] { return std::shared_ptr<void>(driver.make()); }).get());
  }
  // Outside any run: one store of each kind for the process.
  static std::mutex mu;
  static auto* stores = new std::map<const char*, std::shared_ptr<Storage>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Storage>& store = (*stores)[driver.kind];
  if (!store) store = driver.make();
  return *store;
}

Location Location::Of(std::string path) {
  Storage& store = Storage::For(path);
  return Location(store.shared_from_this(), std::move(path));
}

Location Location::Sibling(std::string_view suffix) const { return At(StrCat(path_, suffix)); }
Location Location::Child(std::string_view name) const { return At(JoinPath(path_, name)); }
Location Location::Parent() const { return At(Dirname(path_)); }

namespace {
constexpr char kNotCarriedOut[] = "tfckpt/commit-not-carried-out";
}  // namespace

bool CommitMayHaveHappened(const absl::Status& commit) {
  return (absl::IsUnavailable(commit) || absl::IsCancelled(commit) || absl::IsDeadlineExceeded(commit)) &&
         !commit.GetPayload(kNotCarriedOut).has_value();
}

absl::Status CommitNotCarriedOut(absl::Status s) {
  s.SetPayload(kNotCarriedOut, absl::Cord("1"));
  return s;
}

}  // namespace tfckpt
