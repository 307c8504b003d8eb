// The options of the five commands, defined once: one row each in src/options/table.py,
// from which the build generates this table (options_table.cc), the OPTIONS sections of
// the man pages and the Python package's keywords, docstrings and stubs. The command line
// builds its parser, --help and completions from OptionTable(); both front ends fill a
// request with FillRequest, so that a value is checked once, in the same words, whether
// it came from `-j 4` or from `jobs=4` (docs/ARCHITECTURE.md, "Options").
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tfckpt/commands.h"
#include "tfckpt/run.h"

namespace tfckpt {

// What an option's value is. The value always arrives as text (OptionValues) and is
// checked by CheckOptionValue.
enum class OptionKind {
  kFlag,            // no value ("true" when given)
  kInt,             // a whole number from OptionSpec::lo to hi
  kNumber,          // a floating-point number
  kText,            // anything; the command parses it (partition rules, sizes, regexes)
  kPath,            // a file, prefix or URL
  kChoice,          // one of OptionSpec::words(), the words of the parser that takes it
  kOptionalChoice,  // one of words(), or nothing (then default_value): --collapse-parallel[=check]
  kDuration,        // a whole number of seconds, minutes, hours or days: 90s, 30m, 2h, 7d, 0
};

// What a shell completes an option's value to.
enum class OptionCompletion { kNone, kPath, kWords, kFree };

struct OptionSpec {
  std::string_view command;     // "inspect", "validate", "reshard", "merge", "convert"
  std::string_view name;        // "--jobs"; a positional argument's value name ("CKPT")
  std::string_view short_name;  // "-j", or ""
  std::string_view value_name;  // "N" ("" for a flag)
  std::string_view keyword;     // the Python keyword ("jobs"); "" when Python has none
  OptionKind kind = OptionKind::kText;
  bool repeatable = false;  // given once per value (--partition A --partition B)
  bool required = false;
  bool positional = false;
  int64_t lo = 0, hi = 0;          // kInt
  std::string_view default_value;  // kOptionalChoice: the value of the bare option
  // The words a value begins with, from the parser that reads it (PolicyWords, ...), or
  // null; completion offers them. A choice's values (ServerSideWords): the parser's words
  // are the choices, so they are written once, where the value is parsed.
  const std::vector<std::string>& (*words)() = nullptr;
  OptionCompletion completion = OptionCompletion::kNone;
  std::string_view help;      // the sentence --help shows; the man page's entry begins with it
  std::string_view group;     // --help's heading; "" for the command's main options
  std::string_view needs;     // options this one needs, comma-separated ("--tensor")
  std::string_view excludes;  // options it cannot be given with, comma-separated
};

// Every command's options, command by command, in the order --help lists them.
std::span<const OptionSpec> OptionTable();
// The options of `command` in `table` (default: OptionTable()).
std::vector<const OptionSpec*> OptionsOf(std::string_view command,
                                         std::span<const OptionSpec> table = OptionTable());

// Checks `value` against the option's kind: InvalidArgument "VALUE: not a whole number from
// 0 to 1024", "\"VALUE\": not auto, never or always" (a choice: OneOf its words), "VALUE: not
// a duration such as 90s, 30m, 2h, 7d or 0", ... (a front end puts the option's name before it).
absl::Status CheckOptionValue(const OptionSpec& option, std::string_view value);

// The values a front end was given for one command's options, as text: by option name
// ("--jobs", "CKPT"); a flag's value is "true" (or "false"). Values of a repeatable option
// accumulate in order.
class OptionValues {
 public:
  // `prefix`: what the front end's errors of the option begin with, as it names options:
  // the command line's "--jobs: " (the default: the name and a colon, as CLI11 writes its
  // own errors), Python's "jobs " (the keyword, as Python names an argument).
  void Add(const OptionSpec& option, std::string value, std::string prefix = "");
  bool Has(std::string_view name) const { return values_.count(name) != 0; }
  // The values of `name` (empty when not given).
  const std::vector<std::string>& Of(std::string_view name) const;
  // The value given last for `name`, or "".
  std::string Last(std::string_view name) const;
  // What errors of `name` begin with (Add's prefix).
  std::string ErrorPrefix(std::string_view name) const;

 private:
  std::map<std::string, std::vector<std::string>, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> prefixes_;
};

// Fills `request` and `run` (jobs, connections, object store options) from `values`, each
// value checked (CheckOptionValue) and converted; options not given keep their defaults.
// InvalidArgument names the option as the front end spelled it. Generated from the table:
// each row names the member it fills.
absl::Status FillRequest(const OptionValues& values, InspectRequest* request, RunOptions* run);
absl::Status FillRequest(const OptionValues& values, ValidateRequest* request, RunOptions* run);
absl::Status FillRequest(const OptionValues& values, ReshardRequest* request, RunOptions* run);
absl::Status FillRequest(const OptionValues& values, MergeRequest* request, RunOptions* run);
absl::Status FillRequest(const OptionValues& values, ConvertRequest* request, RunOptions* run);

}  // namespace tfckpt
