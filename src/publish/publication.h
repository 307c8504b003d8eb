// Publication: the one owner of "write, verify, publish" (docs/RELIABILITY.md, "Crash-safe
// outputs", "Interrupts and failed runs"). Every writer of an output -- the tensor-bundle
// writer (BundleWriter), merge's staged, linked and moved data files (MergeBundles), the
// safetensors and .npz writers (convert) -- hands the files it wrote to a Publication,
// which alone decides when and in what order they appear under their final names:
//
//  - the output's files are written under temporary names (a local file), or as uploads
//    not yet completed (an object store): Storage::Create tracks them on the run
//    (run/run.h), so a run that fails or is stopped removes them; a data file staged by a
//    hard link (merge) is tracked here the same way;
//  - a bundle is verified before its commit (its BeforeCommit, reading the files by their
//    final names), where its files can be read before they are committed; on an object
//    store its data objects are committed first and verified then, the index last;
//  - commits go in one order: data files first, then the index (a bundle) or the file
//    that makes a set whole (a safetensors set's index) last;
//  - --force (`overwrite`) replaces an old output so that no reader pairs its index with
//    new data, and a failure keeps the old output where that can be done (PublishBundle);
//  - what a failed or stopped run published is undone by the run; from the first change
//    that cannot be undone (an old index removed, a new one committed, an input's data file
//    moved) the run finishes instead (its point of no return).
//
// Nothing else creates temporaries (kvstore/local/tracked.h) or renames, commits or
// removes an output's files: a writer writes bytes into the WritableFiles it created and
// calls Commit. Usage (a bundle):
//
//   TFCKPT_ASSIGN_OR_RETURN(auto p, Publication::Bundle(Location::Of(prefix), options));
//   ... create the data files (Storage::Create), p->Add(file) each, write them ...
//   TFCKPT_RETURN_IF_ERROR(p->CommitBundle(index));
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/storage.h"

namespace tfckpt {

// How a bundle's index is written (Storage::Create): only if absent -- it is the commit of
// the whole checkpoint, and a run never replaces an index another run wrote meanwhile
// (--force removes the old one first, or replaces it with kIndexReplace: PublishBundle) --
// and held whole up to 64 MiB (an index of ~500,000 entries), so that it can be read before
// it is committed, to be checked.
inline constexpr WriteOptions kIndexWrite{true, 64ull << 20};
// The index that replaces an old one in one step (an object store's PUT; PublishBundle's
// replace_in_place).
inline constexpr WriteOptions kIndexReplace{false, 64ull << 20};

// What follows PREFIX in the names of the backup a --force on an object store makes of the
// old checkpoint (PublishBundle): PREFIX.tfckpt-old-XXXXXXXX.index and .data-….
inline constexpr char kOldCheckpointInfix[] = ".tfckpt-old-";

// What a publication hands its BeforeCommit: its output, written and not yet published.
struct WrittenOutput {
  // Opens the output's files by their final names (storage.h: WritableFile::OpenWritten);
  // any other name is NotWritten.
  FileOpener open;
  // Whether bytes [offset, offset + size) of data file `shard` were read back right after
  // they were written and found equal to the bytes their CRC was computed on
  // (BundleWriterOptions::read_back): that entry's CRC then holds for the file. Empty
  // entries are never named. Empty: none.
  std::function<bool(int32_t shard, uint64_t offset, uint64_t size)> read_back;
  // The CRC-32C of bytes [offset, offset + size) of the input file `file` (a data file of a
  // checkpoint with no stored CRCs, e.g. safetensors), where the run took it as it copied
  // that stored piece whole (BundleWriter::NoteSourceCrc). Empty: none.
  std::function<std::optional<uint32_t>(const std::string& file, uint64_t offset, uint64_t size)> source_crc;
};

// What WrittenOutput::open answers for a name that is not one of the output's files: NotFound
// (never the file of that name on the medium, which may be the checkpoint being replaced).
absl::Status NotWritten(const std::string& path);

// Called once every byte of an output (data files and index) is written and before
// anything of it is published. An error abandons the output (nothing is published; an
// existing checkpoint that --force would replace stays as it was) and is the writer's
// error. Empty: nothing is called.
using BeforeCommit = std::function<absl::Status(const WrittenOutput& written)>;

struct PublishOptions {
  bool overwrite = false;      // --force: replace an existing output
  BeforeCommit before_commit;  // a bundle's check before its commit, e.g. verification (verify.h)
  // A bundle's data files are already under their final names (a scale-out task's data
  // objects, reshard --finalize on an object store): only the index is written, and only it
  // is refused when it exists.
  bool data_in_place = false;
  // On a store whose commit replaces an object in one step (an object store), --force
  // replaces the old index in that step or, where new data take the old ones' names, backs
  // the old checkpoint up first (PublishBundle's replace_in_place). False: the old index is
  // removed before the new one goes up, as on a local disk (MergeBundles).
  bool replace_in_one_step = true;
  // The inputs a bundle consumes (MoveIn, RemoveConsumed) are this tool's own temporaries,
  // all under this directory (reshard --finalize's OUT_temp; their source stays):
  // RemoveConsumed removes it whole, and an output that fails CheckCommitted is removed all
  // the same. Empty: the inputs are the user's; an output moved from them is kept.
  std::string temporaries;
};

class StagedFile;

// The publication of one output: a TF bundle at a prefix, or a set of plain files.
// Thread-safe only where said; one writer drives it.
class Publication {
 public:
  // Begins the publication of the TF bundle at `prefix` (PREFIX.index, PREFIX.data-*): its
  // directory is created; what killed writers left there is removed (their temporaries,
  // by PID, and, when one was killed between its data files' commit and its index's, those
  // data files); an existing checkpoint there (its index or any data file) is refused
  // (AlreadyExists, "use --force") unless options.overwrite.
  // Every file of the output is in `prefix`'s store.
  static absl::StatusOr<std::unique_ptr<Publication>> Bundle(const Location& prefix, PublishOptions options);

  // Begins the publication of the plain files `paths` (a safetensors file or set, an .npz),
  // committed in that order (a set's index last). Refused (storage.h: CheckNotInputs) where
  // one is a file of `inputs` under any name, and (AlreadyExists) where one exists, unless
  // `overwrite`; their directory is created. REQUIRES: `paths` not empty, on one store.
  static absl::StatusOr<std::unique_ptr<Publication>> Files(const std::vector<Location>& paths,
                                                            const std::vector<std::string>& inputs, bool overwrite);

  // Before data files are written straight under the final names of the bundle at
  // `prefix` (a scale-out task on an object store, which has no rename: its Bundle() is the
  // --finalize's, with data_in_place): an old checkpoint's index there removed, so that no
  // reader pairs it with them. AlreadyExists (`refusal`) where there is one and not
  // `overwrite`.
  static absl::Status ClearIndexForDataInPlace(const Location& prefix, bool overwrite, const std::string& refusal);

  ~Publication();  // what was not committed is removed (with the run's undo)
  Publication(const Publication&) = delete;
  Publication& operator=(const Publication&) = delete;

  // ---- The output's files, written and not published (in commit order)
  // `file`, created by the writer (Storage::Create) and written by it: a data file of the
  // bundle, or the next of the files. The publication closes and commits it.
  // REQUIRES: `file` outlives the commit; not committed by anyone else.
  void Add(WritableFile& file);
  // A data file `path` of the bundle as a hard link to the input file `src` under a
  // temporary name (renamed at the commit), or, where that cannot be (another file system,
  // an object store), a copy (inside the store where `mode` and the store allow).
  absl::Status Stage(const Location& src, const std::string& path, ServerSideCopy mode);
  // A data file of the bundle moved from the input file `src` to `path` (merge --move: the
  // input is consumed). The first move is the run's point of no return (a stop before it
  // counts). The bundle is then published without its BeforeCommit.
  absl::Status MoveIn(const std::string& src, const std::string& path);
  // A data file already under its final name `path` (PublishOptions::data_in_place).
  void AddInPlace(const std::string& path);

  // The fault point "output-written" (docs/RELIABILITY.md): the tests' damage
  // (RunOptions::flip_output_byte) planted in `f`, written and not committed, when the byte
  // it names is among bytes [from, from + n) of the file: its lowest bit flipped, as a
  // failing disk or copy would; at most once per publication. Thread-safe.
  absl::Status PlantFault(WritableFile& f, uint64_t from, uint64_t n);

  // ---- The commit
  // How a bundle's index is made: `prepare` (may be empty) runs first, once every data byte
  // is written -- on an object store after the data objects' commit (e.g. CRCs read back
  // from them) --; then `write` writes the index's bytes into the file given to it.
  // `written` adds what the writer knows of its bytes to what BeforeCommit receives
  // (read_back, source_crc; its `open` is the publication's).
  struct Index {
    std::function<absl::Status()> prepare;
    std::function<absl::Status(WritableFile& index)> write;
    WrittenOutput written;
  };
  // Publishes the bundle: the tests' fault planted in the first data file (if not yet);
  // where the data can be read before their commit, the index written, BeforeCommit, every
  // file made durable ("before-commit"), then PublishBundle (data files, "data-committed",
  // the index, "index-committed"); on an object store the data objects closed, then
  // PublishBundle, which verifies (index written, BeforeCommit) between the data's commit
  // and the index's. With moved or in-place data files: the index alone, past the point of
  // no return, an old one (--force) removed first. REQUIRES: Bundle(); called once.
  absl::Status CommitBundle(const Index& index);
  // After CommitBundle, the inputs a merge --move consumed (their prefixes `inputs`): by
  // copy (`by_copy`: an object store, which has no rename) the run is past its point of no
  // return, and their indexes go, then `data_files` (a removal that fails is a note in
  // *notes); then, as TensorFlow does, the indexes, and the inputs' directories that are
  // not the output's, where empty; then PublishOptions::temporaries, whole.
  void RemoveConsumed(const std::vector<Location>& inputs, const std::vector<Location>& data_files, bool by_copy,
                      std::vector<std::string>* notes);
  // Publishes the files: each committed in order. REQUIRES: Files(); every file written
  // and closed; called once.
  absl::Status CommitFiles();

  // ---- After the commit
  // The check of an output that cannot be read back before its commit (a safetensors file
  // or set, an .npz; a bundle whose data files were moved in: merge --move, --finalize),
  // e.g. its verification (verify.h: VerifyWritten), run on the committed output. When it
  // fails -- but for a stop, whose undo is the run's -- nothing that did not pass stays
  // under the final names: the output's files are removed (a bundle's index first) and the
  // error, its code and payloads kept, ends "; removed the output"; a file that cannot be
  // removed (a store refusing DELETE) is named as left behind (run/left_behind.h) and the
  // error is the check's. A bundle whose data files were moved from inputs it consumed is
  // kept (it is all that is left; not from PublishOptions::temporaries), with the check's
  // error.
  // REQUIRES: CommitFiles() or CommitBundle() succeeded.
  absl::Status CheckCommitted(const std::function<absl::Status()>& check);

 private:
  Publication() = default;
  // The output for BeforeCommit: the data files and `index` by their final names.
  WrittenOutput Written(WritableFile& index, const WrittenOutput& extra) const;
  bool DataReadableBeforeCommit() const;
  // The index created (kIndexWrite, or kIndexReplace) and written.
  absl::Status WriteIndex(const Index& index, bool replace);
  absl::Status CloseAll(bool with_index);
  absl::Status CommitLocal(const Index& index);
  absl::Status CommitToStore(const Index& index);
  // With moved or in-place data files: the index alone.
  absl::Status CommitIndexOnly(const Index& index);
  std::vector<std::string> DataNames() const;
  absl::Status CommitData(size_t i);

  // The output's store (every file of it is there), and a bundle's prefix.
  std::shared_ptr<Storage> store_;
  std::string prefix_;
  PublishOptions options_;
  bool bundle_ = false;
  // The files in commit order: written by the writer (`written`), or staged here (`staged`),
  // or neither (moved or in place: `name` only).
  struct Entry {
    std::string name;
    WritableFile* written = nullptr;
    std::unique_ptr<StagedFile> staged;
  };
  std::vector<Entry> files_;
  bool index_only_ = false;  // moved or in-place data files
  bool moved_ = false;       // data files moved from inputs (MoveIn)
  std::unique_ptr<WritableFile> index_;
  std::atomic<bool> fault_planted_{false};
  bool committed_ = false;
};

}  // namespace tfckpt
