// One verification policy for written outputs (see verify.h).
#include "verify/verify.h"

#include "run/run.h"

#include <set>

#include "base/parallel.h"
#include "format/npz/npz_reader.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "validate/compare.h"
#include "validate/validate.h"

namespace tfckpt {
namespace {

// Where findings about the output are placed: its index, else its file.
std::string Where(const Checkpoint& c) {
  return c.info().format == Format::kV2 ? c.info().index_path : c.info().prefix;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenWritten(const std::string& out, const VerifyOptions& options,
                                                        std::vector<Finding>* findings) {
  const std::optional<Format> format = options.format;
  if (options.written != nullptr) {
    return OpenResolved({.format = Format::kV2, .prefix = out}, findings, &options.written->open);
  }
  if (format == Format::kNpz) return OpenNpz(out);
  if (format == Format::kSafetensors) return OpenResolved({.format = Format::kSafetensors, .prefix = out});
  return OpenCheckpoint(out, findings);
}

// The output tensors no source compares (averaged, rewritten, stored partly in several
// sources): slice layout and every CRC (but of pieces the writer read back as it wrote
// them, `read_back`: their CRC was computed on the bytes it wrote and read back).
void CheckUncompared(const Checkpoint& written, const std::set<std::string>& compared, const WrittenOutput* output,
                     int jobs, std::atomic<uint64_t>* progress, std::vector<Finding>* findings) {
  std::vector<const TensorEntry*> left;
  for (const TensorEntry& t : written.tensors()) {
    if (compared.count(t.name) == 0) left.push_back(&t);
  }
  std::vector<std::vector<Finding>> found(left.size());  // (in the tensors' order whatever the threads)
  ParallelFor(left.size(), Jobs(jobs), [&](size_t i) {
    const TensorEntry& t = *left[i];
    std::vector<Finding>* out = &found[i];
    thread_local std::string buffer;
    CheckSliceLayout(t, Where(written), out);
    if (!t.defect.empty()) {
      out->push_back({t.defect_check, Severity::kError, Where(written), t.name, -1, t.defect});
      return;
    }
    for (const StoredSlice& s : t.slices) {
      if (output != nullptr && output->read_back && s.data.size > 0 &&
          output->read_back(s.data.shard, s.data.offset, s.data.size)) {
        continue;
      }
      if (absl::Status crc = written.VerifyCrc(t, s, &buffer); !crc.ok()) out->push_back(FindingOf(crc));
    }
    if (progress != nullptr) *progress += t.bytes;
  });
  for (auto& f : found) findings->insert(findings->end(), f.begin(), f.end());
}

// The first error among the findings of reading back and comparing `out`, as a status.
absl::StatusOr<VerifyReport> Check(const std::string& out, const std::vector<VerifySource>& sources,
                                   const VerifyOptions& options) {
  ValidateReport report;
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> written, OpenWritten(out, options, &report.findings));
  // The phase begins here, whoever verifies (a writer before its commit, a command after
  // it, --finalize): its total is known only now, and each tensor is counted once when it
  // is done, compared with a source (CompareCheckpoints) or checked alone (CheckUncompared).
  uint64_t total = 0;
  for (const TensorEntry& t : written->tensors()) total += t.bytes;
  std::atomic<uint64_t>* progress = StartPhase("verifying", total);
  CompareOptions co;
  co.jobs = options.jobs;
  co.progress = progress;
  co.cast = options.cast;
  // Outputs are copies: where both sides are raw bytes cut on axis 0, the output's CRCs
  // over each input piece prove it (CompareOptions::by_checksum; casts never take it).
  co.by_checksum = true;
  co.strings_without_trailing_nul = options.format == Format::kNpz;
  if (options.written != nullptr && options.written->read_back) {
    co.crc_holds = [&](const StoredSlice& s) {
      return options.written->read_back(s.data.shard, s.data.offset, s.data.size);
    };
    if (options.written->source_crc) {
      co.source_crc = [&](const Checkpoint& c, const StoredSlice& s) -> std::optional<uint32_t> {
        const std::vector<std::string>& files = c.info().data_files;
        if (s.data.shard < 0 || static_cast<size_t>(s.data.shard) >= files.size()) return std::nullopt;
        return options.written->source_crc(files[static_cast<size_t>(s.data.shard)], s.data.offset, s.data.size);
      };
    }
  }
  // An input's defective entry is corrupt input (exit 3), wherever its copy is found.
  for (const VerifySource& s : sources) {
    std::set<std::string> used;
    if (s.names) {
      for (const auto& [name, from] : *s.names) used.insert(from);
    }
    for (const TensorEntry& t : s.input->tensors()) {
      if (t.defect.empty()) continue;
      // (MergedSources leaves defective tensors out of `names`: their copy under the same
      // name is what is checked then.)
      if (!s.names || used.count(t.name) || written->Find(t.name) != nullptr) return s.input->DefectError(t);
    }
  }
  std::set<std::string> compared;
  for (const VerifySource& s : sources) {
    TFCKPT_RETURN_IF_ERROR(CompareCheckpoints(*written, *s.input, s.names ? &*s.names : nullptr, co, &report));
    if (s.names) {
      for (const auto& [name, from] : *s.names) compared.insert(name);
    } else {
      for (const TensorEntry& t : written->tensors()) compared.insert(t.name);
    }
  }
  CheckUncompared(*written, compared, options.written, options.jobs, progress, &report.findings);
  // Damage of an input (a defective entry, a piece past its data file, a CRC that does not
  // hold) is the input's: reported as corrupt input where it is, not as an output that
  // failed its verification. (A copy of a defective entry has the defect too: the input's
  // finding is looked for first.)
  std::set<std::string> input_files;
  for (const VerifySource& s : sources) {
    for (const std::string& f : FilesOf(s.input->info())) input_files.insert(f);
    input_files.insert(s.input->info().prefix);  // (where compare.h places an input's defects)
  }
  for (const Finding& f : report.findings) {
    if (f.severity != Severity::kError || input_files.count(f.file) == 0) continue;
    return DataLossAt(f.check, f.file, f.key, f.offset, f.message);  // (VerifyWritten adds its ending)
  }
  for (const Finding& f : report.findings) {
    if (f.severity != Severity::kError) continue;
    // A damaged copy of a damaged input (a string payload whose lengths do not add up,
    // copied byte for byte by a merge, say): the input's damage is what is reported.
    for (const VerifySource& s : sources) {
      std::string from = f.key;
      if (s.names) {
        auto it = s.names->find(f.key);
        if (it == s.names->end()) continue;  // (not this input's tensor)
        from = it->second;
      }
      const TensorEntry* t = s.input->Find(from);
      if (t == nullptr || !t->defect.empty()) continue;
      std::string buffer;
      for (const StoredSlice& piece : t->slices) {
        if (absl::Status st = s.input->VerifyCrc(*t, piece, &buffer); !st.ok()) return st;
      }
    }
    return DataLossAt("output.mismatch", f.file, f.key, -1, StrCat(f.check, ": ", f.message));
  }
  return VerifyReport{static_cast<int64_t>(written->tensors().size()), report.bytes_checked};
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Checkpoint>>> OpenSources(const std::vector<std::string>& specs) {
  std::vector<std::unique_ptr<Checkpoint>> out;
  for (const std::string& spec : specs) {
    TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(spec));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<VerifySource> MergedSources(const std::vector<std::unique_ptr<Checkpoint>>& inputs) {
  std::vector<VerifySource> sources;
  std::set<std::string> taken;
  for (const auto& c : inputs) {
    VerifySource s{c.get(), std::map<std::string, std::string>()};
    for (const TensorEntry& t : c->tensors()) {
      if (t.defect.empty() && taken.insert(t.name).second) s.names->emplace(t.name, t.name);
    }
    sources.push_back(std::move(s));
  }
  return sources;
}

absl::StatusOr<VerifyReport> VerifyWritten(const std::string& out, const std::vector<VerifySource>& sources,
                                           const VerifyOptions& options) {
  const absl::Status reached = Reached("verifying");
  absl::StatusOr<VerifyReport> r = reached.ok() ? Check(out, sources, options) : reached;
  // Before the commit nothing was published (the writer abandons the output); after it, the
  // output's publication removes it and says so (Publication::CheckCommitted). A stop's
  // message is its own.
  if (r.ok() || options.written == nullptr || absl::IsCancelled(r.status())) return r;
  absl::Status s(r.status().code(), StrCat(r.status().message(), "; nothing was written"));
  r.status().ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { s.SetPayload(url, payload); });
  return s;
}

}  // namespace tfckpt
