// The AWS shared config and credentials files (~/.aws/config, ~/.aws/credentials), read
// as botocore reads them (its configloader over Python's configparser.RawConfigParser):
//
//   - "[section]" headers (the name is everything between the first '[' and the last ']',
//     not trimmed); "name = value" or "name: value" options, names lowercased; lines
//     indented deeper than their option continue its value; full-line '#' and ';'
//     comments (no inline comments: "key = a # b" has the value "a # b");
//   - an option whose value starts on the next, indented lines is a nested block
//     ("s3 =\n  endpoint_url = http://…"): its "k = v" lines form a map;
//   - "[DEFAULT]" options appear in every section; a repeated section or option is an
//     error, as are a line before any section, a line that is no option, an option
//     without a name, a nested line without '=' and bytes that are not UTF-8;
//   - in the config file, "[default]" and "[profile NAME]" are profiles (NAME as a shell
//     word: "[profile 'a b']" is profile "a b"; a later section of the same profile
//     replaces an earlier one), "[sso-session NAME]" and "[services NAME]" likewise;
//     every section of the credentials file is a profile of its name, whose options
//     override the config file's for that profile.
//
// Errors name the file and line, never a value (a line may hold a secret).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/s3/env.h"

namespace tfckpt::s3 {

struct ConfigValue {
  std::string text;                            // continuation lines joined with '\n'
  std::map<std::string, std::string> nested;   // a nested block's "k = v" pairs
  bool is_nested = false;
};
using ConfigSection = std::map<std::string, ConfigValue>;  // by option name (lowercase)

// One file's sections in file order, names as written.
struct IniFile {
  std::vector<std::pair<std::string, ConfigSection>> sections;
};

// Parses one file's text; `path` names it in errors (InvalidArgument "PATH:LINE: what").
absl::StatusOr<IniFile> ParseAwsIni(std::string_view text, std::string_view path);

// Splits `s` into words as Python's shlex.split does (POSIX mode, no comments): blanks
// separate words, '…' quotes literally, "…" quotes with \" and \\ escapes, a backslash
// outside quotes escapes the next character. InvalidArgument for an unclosed quote or a
// trailing backslash. (credential_process commands, profile names in section headers.)
absl::StatusOr<std::vector<std::string>> ShellSplit(std::string_view s);

// Both files, combined as botocore's Session.full_config.
struct AwsConfig {
  std::string config_path, credentials_path;  // as resolved (variables, '~' expanded)
  bool config_found = false, credentials_found = false;
  std::map<std::string, ConfigSection> profiles;  // both files merged
  std::map<std::string, ConfigSection> sso_sessions;
  std::map<std::string, ConfigSection> services;
  // Each file on its own: botocore's shared-credentials-file provider reads only the
  // credentials file, its config-file provider only the config file's profiles.
  std::map<std::string, ConfigSection> credentials_file;
  std::map<std::string, ConfigSection> config_profiles;

  // The profile `name` of the merged view, or nullptr.
  const ConfigSection* Profile(const std::string& name) const;
};

// Builds the combined view from the parsed files (nullopt: the file does not exist).
AwsConfig CombineAwsConfig(const std::optional<IniFile>& config, const std::optional<IniFile>& credentials);

// Reads AWS_CONFIG_FILE (default ~/.aws/config) and AWS_SHARED_CREDENTIALS_FILE (default
// ~/.aws/credentials) through Storage::Local(): '~' and $VAR in them expanded as botocore
// does; a file that does not exist (or is not a regular file) is empty. InvalidArgument
// for a malformed file, naming it and the line.
absl::StatusOr<AwsConfig> LoadAwsConfig(const EnvLookup& env);

// The value of `name` in `section` (nullptr: none), or nullopt when absent. A nested
// block's value is its text.
std::optional<std::string> Option(const ConfigSection* section, const std::string& name);

// "~/x" with $HOME, "$VAR" and "${VAR}" with the variable when set (else left as is), as
// Python's os.path.expandvars(os.path.expanduser(path)).
std::string ExpandPath(std::string_view path, const EnvLookup& env);

}  // namespace tfckpt::s3
