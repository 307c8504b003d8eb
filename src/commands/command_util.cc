#include "commands/command_util.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "run/run.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt {

absl::StatusOr<std::string> OutputName(std::string_view option, const std::string& out, bool tf_prefix) {
  if (out.empty()) return absl::InvalidArgumentError(StrCat(option, ": an output is required"));
  const Location at = Location::Of(out);
  if (IsUrl(out)) TFCKPT_RETURN_IF_ERROR(at.store().CheckAccess(out));
  std::string name = out;
  if (tf_prefix && absl::EndsWith(name, ".index")) name.resize(name.size() - 6);
  const size_t slash = name.find_last_of('/');
  const std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
  if (base.empty() || base == "." || base == ".." || at.At(name).IsDirectory()) {
    std::string dir = name.empty() ? "." : name;
    if (!absl::EndsWith(dir, "/")) dir += "/";
    return absl::InvalidArgumentError(
        StrCat(option, " ", out, ": is a directory; give the output a name inside it (e.g. ", dir, "model)"));
  }
  return name;
}

absl::Status CheckServerSide(ServerSideCopy mode, const std::vector<std::string>& inputs, const std::string& out) {
  if (mode != ServerSideCopy::kAlways) return absl::OkStatus();
  const auto why = [](const std::string& path) -> std::string {
    if (absl::StartsWith(path, "gs://")) {
      return StrCat(path, " is in Cloud Storage, whose XML API has no copy of byte ranges into a part");
    }
    if (!absl::StartsWith(path, "s3://")) return StrCat(path, " is not in an object store");
    return "";
  };
  std::vector<std::string> all = inputs;
  all.push_back(out);
  for (const std::string& path : all) {
    if (std::string reason = why(path); !reason.empty()) {
      return absl::InvalidArgumentError(StrCat("--server-side always: ", reason, ": nothing can be copied inside the store"));
    }
  }
  return absl::OkStatus();
}

void AddTransfers(const std::vector<std::string>& paths, TransferReport* report, std::vector<std::string>* notes) {
  std::vector<Storage*> seen;
  for (const std::string& path : paths) {
    if (path.empty() || !IsUrl(path)) continue;
    Storage* store = &Location::Of(path).store();
    if (std::find(seen.begin(), seen.end(), store) != seen.end()) continue;
    seen.push_back(store);
    TransferStats t = store->Transfers();
    report->object_store = true;
    report->copied_in_store += t.copied_in_store;
    report->uploaded += t.uploaded;
    report->downloaded += t.downloaded;
    for (std::string& n : t.notes) {
      if (std::find(notes->begin(), notes->end(), n) == notes->end()) notes->push_back(std::move(n));
    }
  }
}

absl::Status VerifyBeforeCommit(const std::string& out, const WrittenOutput& written,
                                const std::vector<VerifySource>& sources, VerifyOptions options, bool* verified) {
  options.written = &written;
  if (options.jobs == 0) options.jobs = RunJobs();
  TFCKPT_RETURN_IF_ERROR(VerifyWritten(out, sources, options).status());
  *verified = true;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ExecuteVerified(const Checkpoint& c, const WritePlan& plan, const std::string& out,
                                         bool overwrite, ServerSideCopy server_side, std::string_view phase,
                                         std::optional<std::vector<VerifySource>> sources, bool* verified) {
  uint64_t total = 0;
  for (uint64_t b : plan.file_bytes) total += b;
  ExecuteOptions eo;
  eo.jobs = RunJobs();
  eo.overwrite = overwrite;
  eo.server_side = server_side;
  eo.progress = StartPhase(phase, total);
  if (sources.has_value()) {
    // Before anything is published: an output that fails leaves OUT as it was.
    eo.read_back = true;  // each piece checked as it is written: the verification then reads none
    eo.before_commit = [&](const WrittenOutput& written) {
      return VerifyBeforeCommit(out, written, *sources, {}, verified);
    };
  }
  TFCKPT_RETURN_IF_ERROR(ExecutePlan(c, plan, out, eo));
  return total;
}

absl::Status VerifyCommitted(const std::string& out, const std::vector<VerifySource>& sources,
                             VerifyOptions options, bool* verified) {
  if (options.jobs == 0) options.jobs = RunJobs();
  TFCKPT_RETURN_IF_ERROR(VerifyWritten(out, sources, options).status());
  *verified = true;
  return absl::OkStatus();
}

}  // namespace tfckpt
