// tfckpt convert: safetensors, NumPy .npz, V1 -> V2, dtype casts, TF -> TF edits.
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "tfckpt/commands.h"
#include "tfckpt/strings.h"

namespace tfckpt::cli {
namespace {

int RunConvert(const OptionValues& v) {
  ConvertRequest request;
  const bool json = v.Has("--json"), quiet = v.Has("--quiet");
  RunOptions run = CommandRun("convert", !quiet && !json);
  if (absl::Status s = FillRequest(v, &request, &run); !s.ok()) return ReportError("convert", s);
  const char* cmd = "convert";
  absl::StatusOr<ConvertCommandReport> r = Convert(request, run);
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (json) {
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
  if (!quiet) PrintTransfer(r->transfer);
  return kExitOk;
}

}  // namespace

std::function<int()> AddConvert(CLI::App& app, std::span<const OptionSpec> table) {
  auto values = std::make_shared<OptionValues>();
  CLI::App* sub = app.add_subcommand("convert", "Convert to and from safetensors, to NumPy .npz, V1 to V2, cast dtypes");
  AddTableOptions(sub, table, values.get());
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
  return [values] { return RunConvert(*values); };
}

}  // namespace tfckpt::cli
