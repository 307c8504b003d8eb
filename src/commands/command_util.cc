#include "commands/command_util.h"

#include "absl/strings/match.h"
#include "run/run.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt {

absl::StatusOr<std::string> OutputName(std::string_view option, const std::string& out, bool tf_prefix) {
  if (out.empty()) return absl::InvalidArgumentError(StrCat(option, ": an output is required"));
  if (IsUrl(out)) TFCKPT_RETURN_IF_ERROR(Storage::For(out).CheckAccess(out));
  std::string name = out;
  if (tf_prefix && absl::EndsWith(name, ".index")) name.resize(name.size() - 6);
  const size_t slash = name.find_last_of('/');
  const std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
  if (base.empty() || base == "." || base == ".." || IsDirectory(name)) {
    std::string dir = name.empty() ? "." : name;
    if (!absl::EndsWith(dir, "/")) dir += "/";
    return absl::InvalidArgumentError(
        StrCat(option, " ", out, ": is a directory; give the output a name inside it (e.g. ", dir, "model)"));
  }
  return name;
}

absl::Status VerifyBeforeCommit(const std::string& out, const WrittenOutput& written,
                                const std::vector<VerifySource>& sources, VerifyOptions options, bool* verified) {
  options.written = &written;
  if (options.jobs == 0) options.jobs = RunJobs();
  TFCKPT_RETURN_IF_ERROR(VerifyWritten(out, {}, sources, options).status());
  *verified = true;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ExecuteVerified(const Checkpoint& c, const WritePlan& plan, const std::string& out,
                                         bool overwrite, std::string_view phase,
                                         std::optional<std::vector<VerifySource>> sources, bool* verified) {
  uint64_t total = 0;
  for (uint64_t b : plan.file_bytes) total += b;
  ExecuteOptions eo;
  eo.jobs = RunJobs();
  eo.overwrite = overwrite;
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

absl::Status VerifyCommitted(const std::string& out, const std::vector<std::string>& files,
                             const std::vector<VerifySource>& sources, VerifyOptions options, bool* verified) {
  if (options.jobs == 0) options.jobs = RunJobs();
  TFCKPT_RETURN_IF_ERROR(VerifyWritten(out, files, sources, options).status());
  *verified = true;
  return absl::OkStatus();
}

}  // namespace tfckpt
