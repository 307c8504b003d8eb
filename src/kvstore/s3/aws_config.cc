#include "kvstore/s3/aws_config.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

// Config and credentials files are a few lines: one larger than this is not read.
constexpr uint64_t kMaxConfigFileBytes = 16 << 20;

// Python's str.isspace() for the bytes a config file holds (ASCII and the C0 separators).
bool IsSpace(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f' ||
         (ch >= '\x1c' && ch <= '\x1f');
}

std::string_view Strip(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view RStrip(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// The lines of `text` as Python's universal newlines split them ("\r\n", "\r", "\n").
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      out.push_back(text.substr(start, i - start));
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

absl::Status LineError(std::string_view path, int line, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(path, ":", line, ": ", what));
}

// A value's nested block: "k = v" lines (blank ones skipped).
absl::StatusOr<std::map<std::string, std::string>> ParseNested(std::string_view value) {
  std::map<std::string, std::string> out;
  for (std::string_view line : Lines(value)) {
    line = Strip(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return absl::InvalidArgumentError("a nested line without '='");
    out[std::string(Strip(line.substr(0, eq)))] = std::string(Strip(line.substr(eq + 1)));
  }
  return out;
}

// Adds the [DEFAULT] options to a section (its own win) and turns joined values into
// nested maps where they start on the next line.
absl::Status Finish(const std::map<std::string, std::vector<std::string>>& raw,
                    const std::map<std::string, std::vector<std::string>>& defaults, std::string_view path,
                    int header_line, ConfigSection* out) {
  std::map<std::string, std::vector<std::string>> all = raw;
  for (const auto& [name, lines] : defaults) all.emplace(name, lines);
  for (const auto& [name, lines] : all) {
    std::string joined;
    for (size_t i = 0; i < lines.size(); ++i) StrAppend(&joined, i == 0 ? "" : "\n", lines[i]);
    ConfigValue v;
    v.text = std::string(RStrip(joined));
    if (absl::StartsWith(v.text, "\n")) {
      auto nested = ParseNested(v.text);
      if (!nested.ok()) return LineError(path, header_line, StrCat("option \"", name, "\": ", nested.status().message()));
      v.nested = *std::move(nested);
      v.is_nested = true;
    }
    (*out)[name] = std::move(v);
  }
  return absl::OkStatus();
}

std::optional<std::string> ProfileName(const std::string& header) {
  auto words = ShellSplit(header);
  if (!words.ok() || words->size() != 2) return std::nullopt;
  return (*words)[1];
}

bool IsWordChar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

absl::StatusOr<std::optional<IniFile>> ReadIniFile(const std::string& path) {
  Storage& local = Storage::Local();
  if (!local.IsFile(path)) return std::optional<IniFile>();
  TFCKPT_ASSIGN_OR_RETURN(const std::string text, local.ReadSmallFile(path, kMaxConfigFileBytes));
  TFCKPT_ASSIGN_OR_RETURN(IniFile ini, ParseAwsIni(text, path));
  return std::optional<IniFile>(std::move(ini));
}

}  // namespace

absl::StatusOr<IniFile> ParseAwsIni(std::string_view text, std::string_view path) {
  if (!ValidUtf8(text)) return absl::InvalidArgumentError(StrCat(path, ": not UTF-8 text"));
  struct Section {
    std::string name;
    int line = 0;
    std::map<std::string, std::vector<std::string>> options;
  };
  std::vector<Section> sections;
  std::map<std::string, std::vector<std::string>> defaults;
  std::set<std::string> seen_sections;
  std::set<std::pair<std::string, std::string>> seen_options;
  std::map<std::string, std::vector<std::string>>* cursect = nullptr;
  std::string sectname;
  std::optional<std::string> optname;  // the option continuation lines extend
  size_t indent_level = 0;
  absl::Status first_error;  // configparser reports bad lines after reading the whole file
  int line_no = 0;
  for (std::string_view line : Lines(text)) {
    ++line_no;
    const std::string_view stripped = Strip(line);
    const bool comment = !stripped.empty() && (stripped[0] == '#' || stripped[0] == ';');
    const std::string_view value = comment ? std::string_view() : stripped;
    if (value.empty()) {
      // A blank line inside a value is part of it (dropped again at its end); a comment is not.
      if (!comment && cursect != nullptr && optname.has_value() && !optname->empty()) {
        (*cursect)[*optname].push_back("");
      }
      continue;
    }
    size_t indent = 0;
    while (indent < line.size() && IsSpace(line[indent])) ++indent;
    if (cursect != nullptr && optname.has_value() && !optname->empty() && indent > indent_level) {
      (*cursect)[*optname].push_back(std::string(value));
      continue;
    }
    indent_level = indent;
    const size_t close = value.rfind(']');
    if (value[0] == '[' && close != std::string_view::npos && close >= 2) {
      sectname = std::string(value.substr(1, close - 1));
      if (sectname == "DEFAULT") {
        cursect = &defaults;
      } else {
        if (!seen_sections.insert(sectname).second) return LineError(path, line_no, "section repeated");
        sections.push_back({sectname, line_no, {}});
        cursect = &sections.back().options;
      }
      optname.reset();
      continue;
    }
    if (cursect == nullptr) return LineError(path, line_no, "expected a [section] before anything else");
    const size_t delim = value.find_first_of("=:");
    if (delim == std::string_view::npos) {
      if (first_error.ok()) first_error = LineError(path, line_no, "expected name = value");
      continue;  // (configparser keeps the previous option for continuation lines)
    }
    std::string name = absl::AsciiStrToLower(AV(RStrip(value.substr(0, delim))));
    if (name.empty() && first_error.ok()) first_error = LineError(path, line_no, "an option without a name");
    if (!seen_options.insert({sectname, name}).second) return LineError(path, line_no, "option repeated in its section");
    (*cursect)[name] = {std::string(Strip(value.substr(delim + 1)))};
    optname = name;
  }
  TFCKPT_RETURN_IF_ERROR(first_error);
  IniFile out;
  for (const Section& s : sections) {
    ConfigSection finished;
    TFCKPT_RETURN_IF_ERROR(Finish(s.options, defaults, path, s.line, &finished));
    out.sections.emplace_back(s.name, std::move(finished));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ShellSplit(std::string_view s) {
  enum { kBlank, kWord, kSingle, kDouble } state = kBlank;
  std::vector<std::string> out;
  std::string word;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    switch (state) {
      case kBlank:
      case kWord:
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
          if (state == kWord) out.push_back(std::move(word));
          word.clear();
          state = kBlank;
        } else if (ch == '\\') {
          if (i + 1 >= s.size()) return absl::InvalidArgumentError("a backslash at the end (no escaped character)");
          word.push_back(s[++i]);
          state = kWord;
        } else if (ch == '\'') {
          state = kSingle;
        } else if (ch == '"') {
          state = kDouble;
        } else {
          word.push_back(ch);
          state = kWord;
        }
        break;
      case kSingle:
        if (ch == '\'') {
          state = kWord;
        } else {
          word.push_back(ch);
        }
        break;
      case kDouble:
        if (ch == '"') {
          state = kWord;
        } else if (ch == '\\') {
          if (i + 1 >= s.size()) return absl::InvalidArgumentError("a backslash at the end (no escaped character)");
          const char next = s[++i];
          if (next != '"' && next != '\\') word.push_back('\\');
          word.push_back(next);
        } else {
          word.push_back(ch);
        }
        break;
    }
  }
  if (state == kSingle || state == kDouble) return absl::InvalidArgumentError("no closing quotation");
  if (state == kWord) out.push_back(std::move(word));
  return out;
}

const ConfigSection* AwsConfig::Profile(const std::string& name) const {
  auto it = profiles.find(name);
  return it == profiles.end() ? nullptr : &it->second;
}

AwsConfig CombineAwsConfig(const std::optional<IniFile>& config, const std::optional<IniFile>& credentials) {
  AwsConfig out;
  out.config_found = config.has_value();
  out.credentials_found = credentials.has_value();
  if (config.has_value()) {
    for (const auto& [name, section] : config->sections) {
      if (absl::StartsWith(name, "profile")) {
        if (auto p = ProfileName(name)) out.profiles[*p] = section;
      } else if (absl::StartsWith(name, "sso-session")) {
        if (auto p = ProfileName(name)) out.sso_sessions[*p] = section;
      } else if (absl::StartsWith(name, "services")) {
        if (auto p = ProfileName(name)) out.services[*p] = section;
      } else if (name == "default") {
        out.profiles[name] = section;
      }
    }
  }
  out.config_profiles = out.profiles;
  if (credentials.has_value()) {
    for (const auto& [name, section] : credentials->sections) {
      out.credentials_file[name] = section;
      ConfigSection& merged = out.profiles[name];
      for (const auto& [option, value] : section) merged[option] = value;
    }
  }
  return out;
}

std::string ExpandPath(std::string_view path, const EnvLookup& env) {
  // os.path.expandvars: $NAME and ${NAME} of set variables.
  std::string vars;
  for (size_t i = 0; i < path.size();) {
    if (path[i] == '$' && i + 1 < path.size()) {
      size_t end = i + 1;
      std::string name;
      if (path[end] == '{') {
        const size_t close = path.find('}', end);
        if (close != std::string_view::npos) {
          name = std::string(path.substr(end + 1, close - end - 1));
          end = close + 1;
        }
      } else {
        while (end < path.size() && IsWordChar(path[end])) ++end;
        name = std::string(path.substr(i + 1, end - i - 1));
      }
      if (end > i + 1) {
        if (std::optional<std::string> v = name.empty() ? std::nullopt : env(name)) {
          vars += *v;
        } else {
          vars += path.substr(i, end - i);
        }
        i = end;
        continue;
      }
    }
    vars.push_back(path[i++]);
  }
  // os.path.expanduser: "~" and "~/…" with $HOME ("~user" is left alone).
  if (vars.empty() || vars[0] != '~' || (vars.size() > 1 && vars[1] != '/')) return vars;
  std::optional<std::string> home = env("HOME");
  if (!home.has_value()) return vars;
  std::string h = *home;
  while (!h.empty() && h.back() == '/') h.pop_back();
  std::string out = h + vars.substr(1);
  return out.empty() ? "/" : out;
}

absl::StatusOr<AwsConfig> LoadAwsConfig(const EnvLookup& env) {
  auto file = [&](std::string_view var, std::string_view fallback) {
    std::optional<std::string> v = env(var);
    return ExpandPath(v.has_value() ? *v : std::string(fallback), env);
  };
  const std::string config_path = file("AWS_CONFIG_FILE", "~/.aws/config");
  const std::string credentials_path = file("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials");
  TFCKPT_ASSIGN_OR_RETURN(std::optional<IniFile> config, ReadIniFile(config_path));
  TFCKPT_ASSIGN_OR_RETURN(std::optional<IniFile> credentials, ReadIniFile(credentials_path));
  AwsConfig out = CombineAwsConfig(config, credentials);
  out.config_path = config_path;
  out.credentials_path = credentials_path;
  return out;
}

std::optional<std::string> Option(const ConfigSection* section, const std::string& name) {
  if (section == nullptr) return std::nullopt;
  auto it = section->find(name);
  if (it == section->end()) return std::nullopt;
  return it->second.text;
}

}  // namespace tfckpt::s3
