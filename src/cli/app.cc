// The tfckpt command line as a function, so that tests can run it in-process (in a
// forked child) without exec'ing the binary for each of thousands of inputs.
#include "app.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "common.h"
#include "interrupts.h"
#include "tfckpt/strings.h"
#include "tfckpt/version.h"

namespace tfckpt::cli {
namespace {

// Levenshtein distance, for "did you mean" on a mistyped command.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The subcommand named in argv (the first argument that is one), or nullptr.
CLI::App* NamedCommand(const std::vector<CLI::App*>& subs, const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    for (CLI::App* sub : subs) {
      if (sub->get_name() == arg) return sub;
    }
  }
  return nullptr;
}

// A usage error about the command line itself: "unknown command" with a suggestion,
// or nothing when args[1] is an option or a command.
std::optional<std::string> UnknownCommand(const std::vector<CLI::App*>& subs, const std::vector<std::string>& args) {
  if (args.size() < 2 || args[1].empty() || args[1][0] == '-') return std::nullopt;
  std::string names, best;
  size_t best_distance = 3;  // suggest only close names
  for (CLI::App* sub : subs) {
    if (sub->get_name() == args[1]) return std::nullopt;
    StrAppend(&names, names.empty() ? "" : ", ", sub->get_name());
    const size_t d = EditDistance(args[1], sub->get_name());
    if (d < best_distance) best_distance = d, best = sub->get_name();
  }
  return StrCat("unknown command \"", args[1], "\"", best.empty() ? "" : StrCat("; did you mean ", best, "?"),
                " (commands: ", names, "; see tfckpt --help)");
}

}  // namespace

int RunTfckpt(int argc, char** argv, std::span<const OptionSpec> table) {
  CLI::App app{"tfckpt - inspect, validate, reshard, merge and convert TensorFlow checkpoints\n"
               "without TensorFlow."};
  app.name("tfckpt");
  app.set_version_flag("--version", "tfckpt " TFCKPT_VERSION);
  app.require_subcommand(1);
  app.footer(
      "CKPT may be a prefix (dir/model.ckpt-1000), its .index file, a directory with a\n"
      "'checkpoint' state file or a single *.index, a SavedModel directory, or a V1 file.\n\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage error, 3 unreadable or corrupt input,\n"
      "130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP.\n\n"
      "Examples:\n"
      "  tfckpt inspect model_dir/\n"
      "  tfckpt inspect model.ckpt-1000 --json\n"
      "  tfckpt inspect model.ckpt-1000 --tensor dense/kernel --stats\n"
      "  tfckpt validate model.ckpt-1000 --json\n"
      "  tfckpt validate resharded/model --against model.ckpt-1000\n"
      "  tfckpt reshard model.ckpt-1000 -o ps3/model.ckpt-1000 --partition fixed:3\n"
      "  tfckpt merge bert/model.ckpt -o serve/model.ckpt --drop-optimizer\n"
      "  tfckpt convert model.ckpt-1000 -o model.safetensors\n"
      "  source <(tfckpt completion bash)                 # shell completion (also zsh, fish)\n\n"
      "With --json, every command prints one JSON document on stdout, failures included:\n"
      "  {\"ok\": false, \"error\": {\"id\", \"message\", \"file\", \"key\", \"offset\"}} (ids in man tfckpt).\n"
      "-j N is 0..1024 threads (0: one per core); byte counts take K, M, G, T suffixes (1G, 512MiB).\n\n"
      "Run 'tfckpt COMMAND --help' or 'tfckpt help COMMAND' for a command's options; 'man tfckpt' for more.");

  std::vector<std::function<int()>> runners;
  std::vector<CLI::App*> subs;
  runners.push_back(AddInspect(app, table));
  runners.push_back(AddValidate(app, table));
  runners.push_back(AddReshard(app, table));
  runners.push_back(AddMerge(app, table));
  runners.push_back(AddConvert(app, table));
  runners.push_back(AddCompletion(app, table));
  subs = app.get_subcommands({});
  std::vector<std::string> args(argv, argv + argc);
  SetJsonOutput(std::find(args.begin() + std::min<size_t>(1, args.size()), args.end(), "--json") != args.end());
  // "tfckpt help [COMMAND]" is "tfckpt [COMMAND] --help".
  if (args.size() >= 2 && args[1] == "help") {
    args.erase(args.begin() + 1);
    args.insert(args.begin() + std::min<size_t>(2, args.size()), "--help");
    args.resize(std::min<size_t>(3, args.size()));
  }
  if (auto unknown = UnknownCommand(subs, args)) return ReportError("", absl::InvalidArgumentError(*unknown));

  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 wants them reversed, without argv[0]
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error; the command's --help has the rest.
    const CLI::App* sub = NamedCommand(subs, args);
    const std::string name = sub ? sub->get_name() : "";
    return ReportError(name, absl::InvalidArgumentError(
                                 StrCat(e.what(), " (see tfckpt ", name, name.empty() ? "" : " ", "--help)")));
  }
  for (size_t i = 0; i < subs.size(); ++i) {
    if (!subs[i]->parsed()) continue;
    const std::string name = subs[i]->get_name();
    SetInterruptedCommand(name);
    // The command is one library call (commands.h): a signal asks it to stop (interrupts.h);
    // it removes what it created when it fails or stops (docs/RELIABILITY.md).
    int rc = runners[i]();
    if (InterruptSignal() != 0) {
      if (rc == kExitOk) {
        Warn(name, "interrupted after the output began to be published: the run was finished instead");
      } else if (rc < 128) {
        rc = ReportInterrupted(name);  // (whatever error its unwinding ended with)
      }
    }
    return rc;
  }
  return kExitUsage;
}

}  // namespace tfckpt::cli
