// The option table (tfckpt/options.h) drives the command line: a throwaway row added to it
// appears in the command's --help and in every completion script, and its value is checked
// by its kind, with no other code. (tests/options_test.py sees the same row in the man
// page, Python's keywords and the stubs the generator makes.)
#include <doctest/doctest.h>

#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"
#include "tfckpt/commands.h"
#include "tfckpt/options.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt::testing {
bool NeedsTestData() { return false; }
}  // namespace tfckpt::testing

namespace tfckpt {
namespace {

struct Captured {
  int code;
  std::string out, err;
};

Captured Run(std::vector<std::string> args, std::span<const OptionSpec> table) {
  std::vector<char*> argv;
  args.insert(args.begin(), "tfckpt");
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  const int code = cli::RunTfckpt(static_cast<int>(argv.size()), argv.data(), table);
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {code, out.str(), err.str()};
}

const std::vector<std::string>& ThrowawayWords() {
  static const auto* words = new std::vector<std::string>{"alpha", "beta"};
  return *words;
}

std::vector<OptionSpec> WithThrowawayRow() {
  std::vector<OptionSpec> table(OptionTable().begin(), OptionTable().end());
  table.push_back({.command = "validate",
                   .name = "--throwaway-row",
                   .value_name = "COUNT",
                   .keyword = "throwaway_row",
                   .kind = OptionKind::kChoice,
                   .words = &ThrowawayWords,
                   .completion = OptionCompletion::kWords,
                   .help = "A row only this test adds"});
  return table;
}

TEST_CASE("a row added to the table is in --help, the completions and the parser") {
  const std::vector<OptionSpec> table = WithThrowawayRow();
  const Captured help = Run({"validate", "--help"}, table);
  CHECK(help.code == 0);
  CHECK(help.out.find("--throwaway-row COUNT:{alpha,beta}") != std::string::npos);
  CHECK(help.out.find("A row only this test adds") != std::string::npos);
  // Without the row, it is not there: the help comes from the table, not from code.
  CHECK(Run({"validate", "--help"}, OptionTable()).out.find("throwaway") == std::string::npos);

  for (const char* shell : {"bash", "zsh", "fish"}) {
    const Captured c = Run({"completion", shell}, table);
    CAPTURE(shell);
    CHECK(c.code == 0);
    CHECK(c.out.find("throwaway-row") != std::string::npos);
    CHECK(c.out.find("alpha") != std::string::npos);  // its words
  }
  const Captured bad = Run({"validate", "x", "--throwaway-row", "gamma"}, table);
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--throwaway-row: \"gamma\": not alpha or beta") != std::string::npos);
}

TEST_CASE("a value is checked once, in the same words, whoever gives it") {
  const OptionSpec* jobs = nullptr;
  for (const OptionSpec* o : OptionsOf("validate")) {
    if (o->name == "--jobs") jobs = o;
  }
  REQUIRE(jobs != nullptr);
  CHECK(jobs->lo == 0);
  CHECK(jobs->hi == 1024);
  // The command line: CLI11 puts the option's name before the library's message.
  const Captured c = Run({"validate", "x", "-j", "-1"}, OptionTable());
  CHECK(c.code == 2);
  CHECK(c.err.find("--jobs: -1: not a whole number from 0 to 1024") != std::string::npos);
  // A front end of its own (Python's keywords): FillRequest names the option its way.
  OptionValues values;
  values.Add(*jobs, "-1", "jobs ");
  ValidateRequest request;
  RunOptions run;
  const absl::Status s = FillRequest(values, &request, &run);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()) == "jobs -1: not a whole number from 0 to 1024");
  // A good value fills the run.
  OptionValues good;
  good.Add(*jobs, "3", "jobs ");
  CHECK(FillRequest(good, &request, &run).ok());
  CHECK(run.jobs == 3);
}

TEST_CASE("an error begins as the front end says, not as the name looks") {
  const OptionSpec* jobs = nullptr;
  const OptionSpec* ckpt = nullptr;
  for (const OptionSpec* o : OptionsOf("validate")) {
    if (o->name == "--jobs") jobs = o;
    if (o->name == "CKPT") ckpt = o;
  }
  REQUIRE(jobs != nullptr);
  REQUIRE(ckpt != nullptr);
  auto message = [](const OptionValues& values) {
    ValidateRequest request;
    RunOptions run;
    return std::string(FillRequest(values, &request, &run).message());
  };
  // Without a prefix: the option's name and a colon, the command line's way.
  OptionValues cli;
  cli.Add(*jobs, "-1");
  CHECK(message(cli) == "--jobs: -1: not a whole number from 0 to 1024");
  // A front end's own prefix is taken as it is, whatever the name looks like (a dash, or
  // capitals as a positional's value name has).
  OptionValues keyword;
  keyword.Add(*jobs, "-1", "JOBS ");
  CHECK(message(keyword) == "JOBS -1: not a whole number from 0 to 1024");
  OptionValues dashed;
  dashed.Add(*jobs, "-1", "-j=");
  CHECK(message(dashed) == "-j=-1: not a whole number from 0 to 1024");
  CHECK(dashed.ErrorPrefix("--jobs") == "-j=");
  CHECK(OptionValues().ErrorPrefix("CKPT") == "CKPT: ");
}

TEST_CASE("a parser's words are the values it takes, and it refuses others in their words") {
  CHECK(ServerSideWords() == std::vector<std::string>{"auto", "never", "always"});
  for (const std::string& w : ServerSideWords()) {
    CAPTURE(w);
    const absl::StatusOr<ServerSideCopy> mode = ParseServerSide(w);
    REQUIRE(mode.ok());
    CHECK(ServerSideName(*mode) == w);
  }
  CHECK(ParseServerSide("sometimes").status().message() == "\"sometimes\": not auto, never or always");
  CHECK(OneOf("b", {"a", "b"}).value() == 1);
  CHECK(OneOf("c", {"a"}).status().message() == "\"c\": not a");
  CHECK(ConvertFormatWords() == std::vector<std::string>{"tf", "safetensors", "npz"});
  CHECK(ConflictWords() == std::vector<std::string>{"error", "first", "last"});
  CHECK(CollapseParallelWords() == std::vector<std::string>{"check", "first"});
  // A library caller's request is checked by the command, in the same words.
  ConvertRequest convert;
  convert.src = "in";
  convert.to = "zip";
  CHECK(Convert(convert).status().message() == "--to: \"zip\": not tf, safetensors or npz");
  MergeRequest merge;
  merge.inputs = {"in"};
  merge.out = "no-such-dir/out";
  merge.on_conflict = "newest";
  CHECK(Merge(merge).status().message() == "--on-conflict: \"newest\": not error, first or last");
  merge.on_conflict = "";
  merge.collapse_parallel = "all";
  CHECK(Merge(merge).status().message() == "--collapse-parallel: \"all\": not check or first");
}

TEST_CASE("a choice takes its parser's words, checked once, in the parser's words") {
  using Words = const std::vector<std::string>& (*)();
  const std::map<std::string_view, Words> parsers = {{"--server-side", &ServerSideWords},
                                                     {"--to", &ConvertFormatWords},
                                                     {"--on-conflict", &ConflictWords},
                                                     {"--collapse-parallel", &CollapseParallelWords}};
  int choices = 0;
  for (const OptionSpec& o : OptionTable()) {
    if (o.kind != OptionKind::kChoice && o.kind != OptionKind::kOptionalChoice) continue;
    CAPTURE(std::string(o.command));
    CAPTURE(std::string(o.name));
    REQUIRE(parsers.count(o.name) == 1);
    CHECK((o.words == parsers.at(o.name)));
    ++choices;
  }
  CHECK(choices == 3 + 1 + 1 + 1);  // --server-side in reshard, merge and convert
  // The command line shows and completes the parser's words, and refuses others in them.
  const Captured help = Run({"convert", "--help"}, OptionTable());
  CHECK(help.out.find("--to FORMAT:{tf,safetensors,npz}") != std::string::npos);
  CHECK(help.out.find("--server-side MODE:{auto,never,always}") != std::string::npos);
  CHECK(Run({"merge", "--help"}, OptionTable()).out.find("--collapse-parallel check|first") != std::string::npos);
  const Captured bad = Run({"convert", "x", "-o", "y", "--to", "zip"}, OptionTable());
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--to: \"zip\": not tf, safetensors or npz") != std::string::npos);
  // FillRequest: a --server-side value is parsed once, by ParseServerSide, whose error is
  // the one CheckOptionValue gives, after the front end's prefix.
  const OptionSpec* server_side = nullptr;
  for (const OptionSpec* o : OptionsOf("reshard")) {
    if (o->name == "--server-side") server_side = o;
  }
  REQUIRE(server_side != nullptr);
  CHECK(CheckOptionValue(*server_side, "sometimes").message() == "\"sometimes\": not auto, never or always");
  OptionValues values;
  values.Add(*server_side, "sometimes", "server_side ");
  ReshardRequest request;
  RunOptions run;
  CHECK(FillRequest(values, &request, &run).message() == "server_side \"sometimes\": not auto, never or always");
  OptionValues always;
  always.Add(*server_side, "always");
  REQUIRE(FillRequest(always, &request, &run).ok());
  CHECK(request.server_side == ServerSideCopy::kAlways);
}

TEST_CASE("every row of the five commands is complete") {
  for (const OptionSpec& o : OptionTable()) {
    CAPTURE(std::string(o.command));
    CAPTURE(std::string(o.name));
    CHECK(!o.help.empty());
    if (o.kind == OptionKind::kInt) CHECK(o.lo <= o.hi);
    // A choice's words are its parser's: the table names the function, never the words.
    if (o.kind == OptionKind::kChoice || o.kind == OptionKind::kOptionalChoice) {
      REQUIRE((o.words != nullptr));
      CHECK(!o.words().empty());
    }
    // (An optional choice's words name its value: "check|first".)
    if (o.kind != OptionKind::kFlag && o.kind != OptionKind::kOptionalChoice && !o.positional) {
      CHECK(!o.value_name.empty());
    }
  }
}

}  // namespace
}  // namespace tfckpt
