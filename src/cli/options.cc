#include "options.h"

#include <memory>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tfckpt/strings.h"

namespace tfckpt::cli {
namespace {

// CLI11's check of a value: the library's (CheckOptionValue), so that the command line and
// Python refuse a value in the same words. CLI11 puts "--NAME: " before the message.
CLI::Validator Checked(const OptionSpec& o) {
  return CLI::Validator(
      [&o](std::string& value) -> std::string {
        const absl::Status s = CheckOptionValue(o, value);  // (a bare optional choice, "", is valid)
        return s.ok() ? "" : std::string(SV(s.message()));
      },
      "", "");
}

std::string Names(const OptionSpec& o) {
  return o.short_name.empty() ? std::string(o.name) : StrCat(o.short_name, ",", o.name);
}

// What --help shows after the names: "N", "MODE:{auto,never,always}" (a choice's words, as
// CLI11 shows a set), "check|first" (an optional choice: its words are its value's name).
std::string TypeName(const OptionSpec& o) {
  if (o.positional) return "";
  if (o.kind == OptionKind::kOptionalChoice) return absl::StrJoin(o.words(), "|");
  if (o.kind == OptionKind::kChoice) return StrCat(o.value_name, ":{", absl::StrJoin(o.words(), ","), "}");
  return std::string(o.value_name);
}

CLI::Option* Add(CLI::App* sub, const OptionSpec& o, OptionValues* values) {
  const std::string help(o.help);
  if (o.kind == OptionKind::kFlag) {
    return sub->add_flag_function(Names(o), [&o, values](int64_t) { values->Add(o, "true"); }, help);
  }
  CLI::Option* option;
  if (o.repeatable) {
    option = sub->add_option_function<std::vector<std::string>>(
        Names(o),
        [&o, values](const std::vector<std::string>& all) {
          for (const std::string& v : all) values->Add(o, v);
        },
        help);
    // One value per occurrence (--partition A --partition B): a repeatable option never
    // takes the words after it, such as the positional CKPT. A positional takes them all.
    if (!o.positional) {
      option->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    }
  } else {
    option = sub->add_option_function<std::string>(
        Names(o), [&o, values](const std::string& v) { values->Add(o, v); }, help);
  }
  if (o.kind == OptionKind::kOptionalChoice) option->expected(0, 1);
  option->type_name(TypeName(o))->check(Checked(o));
  if (o.required) option->required();
  return option;
}

}  // namespace

void AddTableOptions(CLI::App* sub, std::span<const OptionSpec> table, OptionValues* values) {
  const std::vector<const OptionSpec*> rows = OptionsOf(sub->get_name(), table);
  for (const OptionSpec* o : rows) {
    CLI::Option* option = Add(sub, *o, values);
    if (!o->group.empty()) option->group(std::string(o->group));
  }
  for (const OptionSpec* o : rows) {
    CLI::Option* option = sub->get_option(std::string(o->name));
    for (absl::string_view other : absl::StrSplit(AV(o->needs), ',', absl::SkipEmpty())) {
      option->needs(std::string(other));
    }
    for (absl::string_view other : absl::StrSplit(AV(o->excludes), ',', absl::SkipEmpty())) {
      option->excludes(std::string(other));
    }
  }
}

}  // namespace tfckpt::cli
