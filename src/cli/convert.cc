// tfckpt convert: safetensors, NumPy .npz, V1 -> V2, dtype casts, TF -> TF edits.
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/commands.h"
#include "tfckpt/strings.h"

namespace tfckpt::cli {
namespace {

struct ConvertArgs {
  ConvertRequest request;
  bool json = false, quiet = false;
  int jobs = 0;
};

int RunConvert(const ConvertArgs& a) {
  const char* cmd = "convert";
  absl::StatusOr<ConvertCommandReport> r = Convert(a.request, CommandRun(cmd, !a.quiet && !a.json, a.jobs));
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (a.json) {
    PrintJson(ToJson(*r));
    return kExitOk;
  }
  if (!r->skipped.empty()) {
    Warn(cmd, StrCat("skipped ", Count(r->skipped.size(), "tensor"), " ", r->format,
                     " cannot hold (--strict makes this an error): ", absl::StrJoin(r->skipped, "; ")));
  }
  for (const auto& n : r->notes) std::cerr << "tfckpt convert: note: " << n << "\n";
  // A sharded safetensors set is its index (the last file) and the files it names.
  const std::vector<std::string>& files = r->files;
  const std::string wrote =
      files.size() > 1 ? StrCat(files.back(), " (", r->format, " index of ", Count(files.size() - 1, "file"), ": ",
                                absl::StrJoin(files.begin(), files.end() - 1, ", "), ")")
                       : StrCat(r->output, " (", r->format, ")");
  std::cout << absl::StrFormat("wrote %s: %s, %s%s\n", wrote, Count(r->tensors, "tensor"), HumanBytes(r->bytes),
                               r->verified ? ", verified" : "");
  if (!a.quiet) PrintTransfer(r->transfer);
  return kExitOk;
}

}  // namespace

std::function<int()> AddConvert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  ConvertRequest& r = args->request;
  CLI::App* sub = app.add_subcommand("convert", "Convert to and from safetensors, to NumPy .npz, V1 to V2, cast dtypes");
  sub->add_option("SRC", r.src, "TF V2 or V1 checkpoint, a .safetensors file or a *.safetensors.index.json set")
      ->required();
  AddOutputOption(sub, &r.out, "path: .safetensors, .npz or a TF prefix (missing directories are created)")->required();
  sub->add_option("--to", r.to, "Output format, whatever the name of -o (default: from its extension, else tf); an extension that "
                  "says another format is a usage error")
      ->check(CLI::IsMember({"tf", "safetensors", "npz"}));
  sub->add_option("--cast", r.casts,
                  "FROM=TO on every tensor of dtype FROM: float32=bfloat16, float32=float16, float32=float64, "
                  "bfloat16=float32, float16=float32, float64=float32 (repeatable)");
  AddNameRuleOptions(sub, &r.include, &r.exclude, &r.renames);
  sub->add_option("--max-file-size", r.max_file_size,
                  "safetensors: split into NAME-0000i-of-0000K.safetensors files of at most BYTES (K/M/G suffixes) "
                  "plus NAME.safetensors.index.json");
  sub->add_option("--partition", r.partitions, "TF output: [REGEX=]SPEC rules of 'tfckpt reshard' (repeatable)");
  sub->add_flag("--strict", r.strict, "A tensor the output format cannot hold is an error, not a warning");
  AddForceOption(sub, &r.force);
  AddNoVerifyOption(sub, &r.no_verify, "every format: read back and compared with the input");
  AddServerSideOption(sub, &r.server_side);
  AddJsonOption(sub, &args->json);
  AddJobsOption(sub, &args->jobs, "Threads copying (the output does not depend on it)");
  AddConnectionsOption(sub);
  AddQuietOption(sub, &args->quiet, "labelled 'writing', then 'verifying', the comparison with the input");
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
