// Status helpers shared by the library. Every fallible library call returns
// absl::Status or absl::StatusOr<T>; these macros keep the call sites short.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tfckpt/strings.h"

#define TFCKPT_CONCAT_INNER_(a, b) a##b
#define TFCKPT_CONCAT_(a, b) TFCKPT_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define TFCKPT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status tfckpt_status_ = (expr);          \
    if (!tfckpt_status_.ok()) return tfckpt_status_; \
  } while (0)

// `lhs = value of expr` for an absl::StatusOr expression, or return its error.
#define TFCKPT_ASSIGN_OR_RETURN(lhs, expr) \
  TFCKPT_ASSIGN_OR_RETURN_IMPL_(TFCKPT_CONCAT_(tfckpt_statusor_, __LINE__), lhs, expr)
#define TFCKPT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

namespace tfckpt {

// Errors about the contents of a file carry a stable check id (documented in
// man/tfckpt-validate.1, e.g. "table.block-crc") and where they were found. The message
// reads "FILE: key "KEY": offset N: what" with the parts that are known; the parts are
// also attached as payloads so `validate` can report them as fields (see ErrorInfoOf).
absl::Status DataLossAt(std::string_view check, std::string_view file, std::string_view key, int64_t offset,
                        std::string_view what);

// A DataLoss error without a location yet (payload decoders), with a check id.
absl::Status DataLossCheck(std::string_view check, std::string_view what);

// Places `inner` (e.g. from DecodeStrings) at FILE/KEY/OFFSET, keeping its check id, or
// using `fallback_check` when it has none -- unless `inner` is a failure of the medium
// (Unavailable, DeadlineExceeded, PermissionDenied, Unauthenticated, Cancelled: a store
// that stopped answering, no permission, a stop), which says nothing of the file's bytes
// and so gets no check id (its error id stays "io" and the like). Keeps inner's code.
absl::Status Locate(const absl::Status& inner, std::string_view fallback_check, std::string_view file,
                    std::string_view key, int64_t offset, std::string_view what_prefix = "");

// `s` with `file` attached as where it happened and `what` as its message without the
// file (see ErrorInfoOf); the message itself is unchanged (it already names the file).
absl::Status AtFile(absl::Status s, std::string_view file, std::string_view what);

struct ErrorInfo {
  std::string check;  // "" when the error carries none
  std::string file, key;
  int64_t offset = -1;
  std::string what;   // the message without the location prefix
};
ErrorInfo ErrorInfoOf(const absl::Status& s);

// An errno-based error for `path`: "PATH: WHAT: strerror", NotFound for ENOENT,
// ResourceExhausted for ENOSPC, EDQUOT and EFBIG (said to be the file size limit),
// PermissionDenied for EACCES and EPERM, otherwise Unavailable; with `path` attached
// (AtFile).
absl::Status ErrnoError(std::string_view path, std::string_view what, int err);

// Prefixes `status`'s message with `context + ": "`, keeping its code.
absl::Status Annotate(const absl::Status& status, std::string_view context);

// Printable form of a key that may hold arbitrary bytes (C escapes for non-printables).
std::string PrintableKey(std::string_view key);

enum class Severity { kError, kWarning, kNote };  // a note is information, never a failure

// One problem found in a checkpoint: a stable check id (man tfckpt-validate), where it
// is, and what is wrong.
struct Finding {
  std::string check;
  Severity severity = Severity::kError;
  std::string file, key;
  int64_t offset = -1;
  std::string message;
};

// The finding an error status describes (its check id and location payloads).
Finding FindingOf(const absl::Status& s, Severity severity = Severity::kError);

// What a call's clean-up could not remove (an object store refusing DELETE) is added to its
// error's message after this text: "MESSAGE; left behind (could not be removed): URL, ...
// and N more" (docs/RELIABILITY.md).
inline constexpr char kLeftBehindMarker[] = "; left behind (could not be removed): ";

}  // namespace tfckpt
