// tfckpt convert: safetensors, NumPy .npz, V1 -> V2, dtype casts, TF -> TF edits.
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "progress.h"
#include "tfckpt/bundle_writer.h"
#include "tfckpt/combine.h"
#include "tfckpt/convert.h"
#include "tfckpt/copy.h"
#include "tfckpt/open.h"
#include "tfckpt/reshard.h"
#include "tfckpt/status.h"
#include "tfckpt/validate.h"

namespace tfckpt::cli {
namespace {

struct ConvertArgs {
  std::string src, out, to;
  std::vector<std::string> casts, include, exclude, renames, partitions;
  std::string max_file_size;
  bool strict = false, force = false, no_verify = false, json = false, quiet = false;
  int jobs = 0;
};

// The format a name says: "safetensors", "npz", "tf" (NAME.index) or "" (no telling).
std::string FormatOfName(const std::string& out) {
  if (absl::EndsWith(out, ".safetensors") || absl::EndsWith(out, ".safetensors.index.json")) return "safetensors";
  if (absl::EndsWith(out, ".npz")) return "npz";
  if (absl::EndsWith(out, ".index")) return "tf";
  return "";
}

// --to decides; without it the name does (default tf). A name that says another format
// than --to is a usage error.
absl::StatusOr<std::string> TargetFormat(const ConvertArgs& a) {
  const std::string named = FormatOfName(a.out);
  if (a.to.empty()) return named.empty() ? "tf" : named;
  if (!named.empty() && named != a.to) {
    return absl::InvalidArgumentError(StrCat("-o ", a.out, ": the name says ", named, " but --to is ", a.to,
                                             " (rename the output or drop --to)"));
  }
  return a.to;
}

int RunConvert(const ConvertArgs& args) {
  const char* cmd = "convert";
  auto target = TargetFormat(args);
  if (!target.ok()) return ReportError(cmd, target.status());
  const std::string format = *target;
  auto out = OutputName("-o", args.out, format == "tf");
  if (!out.ok()) return ReportError(cmd, out.status());
  ConvertArgs a = args;
  a.out = *out;
  if (absl::EndsWith(a.out, ".safetensors.index.json")) {  // a set is named by its index, as SRC may be
    a.out.resize(a.out.size() - std::string_view(".index.json").size());
  }
  std::map<int32_t, int32_t> casts;
  for (const auto& text : a.casts) {
    auto c = ParseCast(text);
    if (!c.ok()) return ReportError(cmd, c.status());
    casts[c->first] = c->second;
  }
  std::vector<RenameRule> renames;
  for (const auto& r : a.renames) {
    auto rule = ParseRenameRule(r);
    if (!rule.ok()) return ReportError(cmd, rule.status());
    renames.push_back(*rule);
  }
  uint64_t max_file_size = 0;
  if (!a.max_file_size.empty()) {
    auto n = ParseByteSize(a.max_file_size);
    if (!n || *n == 0) {
      return ReportError(cmd, absl::InvalidArgumentError(StrCat("--max-file-size \"", a.max_file_size, "\": not a size")));
    }
    if (format != "safetensors") {
      return ReportError(cmd, absl::InvalidArgumentError("--max-file-size applies to safetensors output"));
    }
    max_file_size = *n;
  }
  if (!a.partitions.empty() && format != "tf") {
    return ReportError(cmd, absl::InvalidArgumentError("--partition applies to TensorFlow output"));
  }
  std::unique_ptr<Progress> progress;
  auto start = [&](uint64_t total, const char* phase = "writing") {
    progress.reset();  // (ends the line of the phase before)
    progress = std::make_unique<Progress>(total, !a.quiet && !a.json, phase);
    return progress->counter();
  };
  nlohmann::ordered_json j{{"output", a.out}, {"format", format}};
  std::vector<std::string> skipped, notes;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  bool verified = false;
  if (format == "tf") {
    if (!a.partitions.empty()) {
      if (!casts.empty() || !renames.empty() || !a.include.empty() || !a.exclude.empty()) {
        return ReportError(cmd, absl::InvalidArgumentError(
                                    "--partition cannot be combined with --cast/--rename/--include/--exclude "
                                    "(convert first, then reshard)"));
      }
      auto c = OpenCheckpoint(a.src);
      if (!c.ok()) return ReportError(cmd, c.status());
      ReshardOptions ro;
      for (const auto& text : a.partitions) {
        auto rule = ParsePartitionRule(text);
        if (!rule.ok()) return ReportError(cmd, rule.status());
        ro.rules.push_back(*rule);
      }
      ro.policy.kind = Policy::Kind::kSingle;
      auto plan = PlanReshard(**c, ro);
      if (!plan.ok()) return ReportError(cmd, plan.status());
      uint64_t total = 0;
      for (auto b : plan->file_bytes) total += b;
      ExecuteOptions eo;
      eo.jobs = a.jobs;
      eo.overwrite = a.force;
      eo.progress = start(total);
      if (!a.no_verify) {
        eo.read_back = true;
        eo.before_commit = [&](const WrittenOutput& written) {
          VerifyOptions vo;
          vo.jobs = a.jobs;
          return VerifyBeforeCommit(a.out, written, {{c->get()}}, vo, total, !a.quiet && !a.json, &progress,
                                    &verified);
        };
      }
      absl::Status s = ExecutePlan(**c, *plan, a.out, eo);
      progress.reset();
      if (!s.ok()) return ReportWriteError(cmd, s);
      tensors = static_cast<int64_t>(plan->tensors.size());
      bytes = total;
      notes = plan->notes;
      KeepUntilExit(std::shared_ptr<const void>(std::move(*c)));
    } else {
      CombineOptions o;
      o.include = a.include;
      o.exclude = a.exclude;
      o.renames = renames;
      o.casts = casts;
      o.overwrite = a.force;
      o.jobs = a.jobs;
      o.start_progress = start;
      if (!a.no_verify) {
        o.read_back = true;
        o.before_commit = [&](const WrittenOutput& written, const CombineReport& plan) -> absl::Status {
          TFCKPT_ASSIGN_OR_RETURN(auto sources, OpenSources(plan.inputs));
          VerifyOptions vo;
          vo.jobs = a.jobs;
          vo.cast = !casts.empty();
          return VerifyBeforeCommit(a.out, written, CombinedSources(plan, sources), vo, plan.bytes,
                                    !a.quiet && !a.json, &progress, &verified);
        };
      }
      auto r = CombineCheckpoints({a.src}, a.out, o);
      progress.reset();
      if (!r.ok()) return ReportWriteError(cmd, r.status());
      tensors = static_cast<int64_t>(r->tensors.size());
      bytes = r->bytes;
      notes = r->notes;
    }
    j["files"] = nlohmann::ordered_json::array({a.out + ".index"});
  } else {
    auto c = OpenCheckpoint(a.src);
    if (!c.ok()) return ReportError(cmd, c.status());
    ConvertOptions o;
    o.include = a.include;
    o.exclude = a.exclude;
    o.renames = renames;
    o.casts = casts;
    o.max_file_size = max_file_size;
    o.strict = a.strict;
    o.overwrite = a.force;
    o.jobs = a.jobs;
    o.start_progress = start;
    auto r = format == "safetensors" ? WriteSafetensors(**c, a.out, o) : WriteNpz(**c, a.out, o);
    progress.reset();
    if (!r.ok()) return ReportError(cmd, r.status());
    tensors = r->tensors;
    bytes = r->bytes;
    skipped = r->skipped;
    notes = r->notes;
    j["files"] = r->files;
    if (!a.no_verify) {
      // Read back with the strict reader (every header and range) and compared with the input.
      VerifyOptions vo;
      vo.jobs = a.jobs;
      vo.cast = !casts.empty();
      vo.format = format == "npz" ? Format::kNpz : Format::kSafetensors;
      if (int rc = VerifyOutput(cmd, format == "npz" ? a.out : r->files.back(), r->files, {{c->get(), r->sources}}, vo); rc != kExitOk) {
        return rc;
      }
      verified = true;
    }
    KeepUntilExit(std::shared_ptr<const void>(std::move(*c)));
  }
  if (a.json) {
    j["tensors"] = tensors;
    j["bytes"] = bytes;
    j["skipped"] = skipped;
    j["notes"] = notes;
    j["verified"] = verified;
    PrintJson(j);
    return kExitOk;
  }
  if (!skipped.empty()) {
    Warn(cmd, StrCat("skipped ", Count(skipped.size(), "tensor"), " ", format, " cannot hold (--strict makes this an error): ",
                     absl::StrJoin(skipped, "; ")));
  }
  for (const auto& n : notes) std::cerr << "tfckpt convert: note: " << n << "\n";
  // A sharded safetensors set is its index (the last file) and the files it names.
  const auto files = j["files"].get<std::vector<std::string>>();
  const std::string wrote =
      files.size() > 1 ? StrCat(files.back(), " (", format, " index of ", Count(files.size() - 1, "file"), ": ",
                                absl::StrJoin(files.begin(), files.end() - 1, ", "), ")")
                       : StrCat(a.out, " (", format, ")");
  std::cout << absl::StrFormat("wrote %s: %s, %s%s\n", wrote, Count(tensors, "tensor"), HumanBytes(bytes),
                               verified ? ", verified" : "");
  return kExitOk;
}

}  // namespace

std::function<int()> AddConvert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand("convert", "Convert to and from safetensors, to NumPy .npz, V1 to V2, cast dtypes");
  sub->add_option("SRC", args->src, "TF V2 or V1 checkpoint, a .safetensors file or a *.safetensors.index.json set")
      ->required();
  AddOutputOption(sub, &args->out, "path: .safetensors, .npz or a TF prefix (missing directories are created)")->required();
  sub->add_option("--to", args->to, "Output format, whatever the name of -o (default: from its extension, else tf); an extension that "
                  "says another format is a usage error")
      ->check(CLI::IsMember({"tf", "safetensors", "npz"}));
  sub->add_option("--cast", args->casts,
                  "FROM=TO on every tensor of dtype FROM: float32=bfloat16, float32=float16, float32=float64, "
                  "bfloat16=float32, float16=float32, float64=float32 (repeatable)");
  AddNameRuleOptions(sub, &args->include, &args->exclude, &args->renames);
  sub->add_option("--max-file-size", args->max_file_size,
                  "safetensors: split into NAME-0000i-of-0000K.safetensors files of at most BYTES (K/M/G suffixes) "
                  "plus NAME.safetensors.index.json");
  sub->add_option("--partition", args->partitions, "TF output: [REGEX=]SPEC rules of 'tfckpt reshard' (repeatable)");
  sub->add_flag("--strict", args->strict, "A tensor the output format cannot hold is an error, not a warning");
  AddForceOption(sub, &args->force);
  AddNoVerifyOption(sub, &args->no_verify, "every format: read back and compared with the input");
  AddJsonOption(sub, &args->json);
  AddJobsOption(sub, &args->jobs, "Threads copying (the output does not depend on it)");
  AddConnectionsOption(sub);
  AddQuietOption(sub, &args->quiet, "labelled 'writing'");
  sub->footer(
      "Examples:\n"
      "  tfckpt convert model.ckpt-1000 -o model.safetensors\n"
      "  tfckpt convert gs://bkt/run/ckpt-100 -o s3://bkt/model.safetensors\n"
      "  tfckpt convert model.ckpt-1000 -o model.safetensors --max-file-size 5G\n"
      "  tfckpt convert model.ckpt-1000 -o weights.npz --cast bfloat16=float32\n"
      "  tfckpt convert model.safetensors -o tf/model.ckpt --partition 'embedding=fixed:4'\n"
      "  tfckpt convert old/model.ckpt -o v2/model.ckpt                # V1 -> V2\n"
      "  tfckpt convert model.ckpt -o bf16/model.ckpt --cast float32=bfloat16\n"
      "  tfckpt convert model.ckpt-1000 -o weights.st --to safetensors\n\n"
      "A run that fails or is interrupted (Ctrl-C: exit 130, SIGTERM 143, SIGHUP 129) leaves nothing\n"
      "under the output's names.\n"
      "Exit codes: 0 ok, 1 the output does not match the input (not written: a TF output is checked before it is published; safetensors and .npz are removed), 2 usage error or refused request (bfloat16\n"
      "to npz without a cast, --strict with tensors the format cannot hold, existing output), 3\n"
      "unreadable or corrupt input (including malformed safetensors headers).");
  return [args] { return RunConvert(*args); };
}

}  // namespace tfckpt::cli
