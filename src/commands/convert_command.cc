// convert: safetensors, NumPy .npz, V1 -> V2, dtype casts, TF -> TF edits (commands.h).
#include <map>

#include "absl/strings/match.h"
#include "commands/command_util.h"
#include "run/run.h"
#include "merge/combine.h"
#include "tfckpt/commands.h"
#include "convert/convert.h"
#include "copy/copy.h"
#include "tfckpt/open.h"
#include "reshard/reshard.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace {

// The format a name says: "safetensors", "npz", "tf" (NAME.index) or "" (no telling).
std::string FormatOfName(const std::string& out) {
  if (absl::EndsWith(out, ".safetensors") || absl::EndsWith(out, ".safetensors.index.json")) return "safetensors";
  if (absl::EndsWith(out, ".npz")) return "npz";
  if (absl::EndsWith(out, ".index")) return "tf";
  return "";
}

// `to` decides; without it the name does (default tf). A name that says another format
// than `to` is a usage error.
absl::StatusOr<std::string> TargetFormat(const ConvertRequest& r) {
  const std::string named = FormatOfName(r.out);
  if (r.to.empty()) return named.empty() ? "tf" : named;
  if (absl::Status s = OneOf(r.to, ConvertFormatWords()).status(); !s.ok()) return Annotate(s, "--to");
  if (!named.empty() && named != r.to) {
    return absl::InvalidArgumentError(StrCat("-o ", r.out, ": the name says ", named, " but --to is ", r.to,
                                             " (rename the output or drop --to)"));
  }
  return r.to;
}

// convert --partition: the input resharded into one data file (reshard's rules, policy
// single), verified before its commit.
absl::Status ConvertPartitioned(const ConvertRequest& r, const std::string& out, ConvertCommandReport* report) {
  if (!r.casts.empty() || !r.renames.empty() || !r.include.empty() || !r.exclude.empty()) {
    return absl::InvalidArgumentError(
        "--partition cannot be combined with --cast/--rename/--include/--exclude (convert first, then reshard)");
  }
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(r.src));
  ReshardOptions ro;
  for (const auto& text : r.partitions) {
    TFCKPT_ASSIGN_OR_RETURN(PartitionRule rule, ParsePartitionRule(text));
    ro.rules.push_back(std::move(rule));
  }
  ro.policy.kind = Policy::Kind::kSingle;
  TFCKPT_ASSIGN_OR_RETURN(ReshardPlan plan, PlanReshard(*c, ro));
  std::optional<std::vector<VerifySource>> sources;
  if (!r.no_verify) sources = std::vector<VerifySource>{{c.get(), std::nullopt}};
  TFCKPT_ASSIGN_OR_RETURN(const uint64_t total,
                          ExecuteVerified(*c, plan, out, r.force, r.server_side, "writing", std::move(sources),
                                                          &report->verified));
  report->tensors = static_cast<int64_t>(plan.tensors.size());
  report->bytes = total;
  report->notes = plan.notes;
  return absl::OkStatus();
}

// TF output with edits or casts: CombineCheckpoints with one input.
absl::Status ConvertToTf(const ConvertRequest& r, const std::string& out, const std::map<int32_t, int32_t>& casts,
                         const std::vector<RenameRule>& renames, ConvertCommandReport* report) {
  CombineOptions o;
  o.include = r.include;
  o.exclude = r.exclude;
  o.renames = renames;
  o.casts = casts;
  o.overwrite = r.force;
  o.server_side = r.server_side;
  o.jobs = RunJobs();
  o.start_progress = [](uint64_t total) { return StartPhase("writing", total); };
  if (!r.no_verify) {
    o.read_back = true;
    o.before_commit = [&](const WrittenOutput& written, const CombineReport& plan) -> absl::Status {
      TFCKPT_ASSIGN_OR_RETURN(auto sources, OpenSources(plan.inputs));
      VerifyOptions vo;
      vo.cast = !casts.empty();
      return VerifyBeforeCommit(out, written, CombinedSources(plan, sources), vo, &report->verified);
    };
  }
  TFCKPT_ASSIGN_OR_RETURN(CombineReport c, CombineCheckpoints({r.src}, out, o));
  report->tensors = static_cast<int64_t>(c.tensors.size());
  report->bytes = c.bytes;
  report->notes = c.notes;
  return absl::OkStatus();
}

// safetensors or .npz, verified after the commit with the strict reader (its publication
// removes it when it does not match).
absl::Status ConvertToFile(const ConvertRequest& r, const std::string& out, const std::string& format,
                           ConvertOptions o, ConvertCommandReport* report) {
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(r.src));
  o.jobs = RunJobs();
  o.start_progress = [](uint64_t total, const char* phase) { return StartPhase(phase, total); };
  if (!r.no_verify) {
    VerifyOptions vo;
    vo.cast = !o.casts.empty();
    vo.format = format == "npz" ? Format::kNpz : Format::kSafetensors;
    o.after_commit = [&, vo](const ConvertReport& w) {
      return VerifyCommitted(format == "npz" ? out : w.files.back(), {{c.get(), w.sources}}, vo, &report->verified);
    };
  }
  TFCKPT_ASSIGN_OR_RETURN(ConvertReport w, format == "safetensors" ? WriteSafetensors(*c, out, o) : WriteNpz(*c, out, o));
  report->tensors = w.tensors;
  report->bytes = w.bytes;
  report->skipped = w.skipped;
  report->notes = w.notes;
  report->files = w.files;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& ConvertFormatWords() {
  static const auto* words = new std::vector<std::string>{"tf", "safetensors", "npz"};
  return *words;
}

absl::StatusOr<ConvertCommandReport> Convert(const ConvertRequest& r, const RunOptions& run) {
  return AsRun<ConvertCommandReport>(run, [&]() -> absl::StatusOr<ConvertCommandReport> {
    if (r.src.empty()) return absl::InvalidArgumentError("SRC is required");
    TFCKPT_ASSIGN_OR_RETURN(const std::string format, TargetFormat(r));
    if (!r.out.empty()) TFCKPT_RETURN_IF_ERROR(CheckServerSide(r.server_side, {r.src}, r.out));
    if (r.server_side == ServerSideCopy::kAlways && format == "npz") {
      // (Their writers send every byte from here: nothing is copied inside the store yet.)
      return absl::InvalidArgumentError(StrCat("--server-side always: convert to ", format,
                                               " copies nothing inside the store; use auto or never"));
    }
    TFCKPT_ASSIGN_OR_RETURN(std::string out, OutputName("-o", r.out, format == "tf"));
    if (absl::EndsWith(out, ".safetensors.index.json")) {  // a set is named by its index, as SRC may be
      out.resize(out.size() - std::string_view(".index.json").size());
    }
    std::map<int32_t, int32_t> casts;
    for (const auto& text : r.casts) {
      TFCKPT_ASSIGN_OR_RETURN(auto cast, ParseCast(text));
      casts[cast.first] = cast.second;
    }
    std::vector<RenameRule> renames;
    for (const auto& text : r.renames) {
      TFCKPT_ASSIGN_OR_RETURN(RenameRule rule, ParseRenameRule(text));
      renames.push_back(std::move(rule));
    }
    uint64_t max_file_size = 0;
    if (!r.max_file_size.empty()) {
      const std::optional<uint64_t> n = ParseByteSize(r.max_file_size);
      if (!n || *n == 0) {
        return absl::InvalidArgumentError(StrCat("--max-file-size \"", r.max_file_size, "\": not a size"));
      }
      if (format != "safetensors") {
        return absl::InvalidArgumentError("--max-file-size applies to safetensors output");
      }
      max_file_size = *n;
    }
    if (!r.partitions.empty() && format != "tf") {
      return absl::InvalidArgumentError("--partition applies to TensorFlow output");
    }
    ConvertCommandReport report;
    report.output = out;
    report.format = format;
    if (format == "tf") {
      if (!r.partitions.empty()) {
        TFCKPT_RETURN_IF_ERROR(ConvertPartitioned(r, out, &report));
      } else {
        TFCKPT_RETURN_IF_ERROR(ConvertToTf(r, out, casts, renames, &report));
      }
      report.files = {out + ".index"};
    } else {
      ConvertOptions o;
      o.include = r.include;
      o.exclude = r.exclude;
      o.renames = renames;
      o.casts = casts;
      o.max_file_size = max_file_size;
      o.strict = r.strict;
      o.overwrite = r.force;
      o.server_side = r.server_side;
      TFCKPT_RETURN_IF_ERROR(ConvertToFile(r, out, format, o, &report));
    }
    AddTransfers({r.src, out}, &report.transfer, &report.notes);
    return report;
  });
}

}  // namespace tfckpt
