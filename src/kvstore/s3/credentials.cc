#include "kvstore/s3/credentials.h"

#include <algorithm>
#include <cctype>

#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

class Fixed final : public CredentialProvider {
 public:
  Fixed(Credentials c, std::string source) : c_(std::move(c)), source_(std::move(source)) {}
  absl::StatusOr<Credentials> Get() override { return c_; }
  std::string Describe() const override { return source_; }

 private:
  const Credentials c_;
  const std::string source_;
};

class Failing final : public CredentialProvider {
 public:
  Failing(std::string message, std::string source) : message_(std::move(message)), source_(std::move(source)) {}
  absl::StatusOr<Credentials> Get() override { return absl::UnauthenticatedError(message_); }
  std::string Describe() const override { return source_; }

 private:
  const std::string message_;
  const std::string source_;
};

// After a failed fetch while the current credentials still work, the next try waits this
// long (every request would otherwise wait for a failing service).
constexpr std::chrono::seconds kRetryFetchAfter{10};

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// Reads exactly `n` digits at s[*at] into *out.
bool Digits(std::string_view s, size_t* at, size_t n, int* out) {
  if (*at + n > s.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    const char ch = s[*at + i];
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + (ch - '0');
  }
  *at += n;
  *out = v;
  return true;
}

bool Expect(std::string_view s, size_t* at, char ch) {
  if (*at >= s.size() || s[*at] != ch) return false;
  ++*at;
  return true;
}

}  // namespace

std::shared_ptr<CredentialProvider> FixedCredentials(Credentials credentials, std::string source) {
  return std::make_shared<Fixed>(std::move(credentials), std::move(source));
}

std::shared_ptr<CredentialProvider> NoCredentials(std::string message, std::string source) {
  return std::make_shared<Failing>(std::move(message), std::move(source));
}

RefreshingCredentials::RefreshingCredentials(Fetch fetch, std::string source, Clock clock)
    : fetch_(std::move(fetch)), source_(std::move(source)), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
}

SystemTime RefreshingCredentials::RefreshTime(SystemTime fetched, SystemTime expiration) {
  const auto lifetime = expiration - fetched;
  const auto margin = std::min<std::chrono::system_clock::duration>(std::chrono::minutes(15), lifetime / 2);
  return expiration - margin;
}

int RefreshingCredentials::fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetches_;
}

absl::StatusOr<Credentials> RefreshingCredentials::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  const SystemTime now = clock_();
  if (current_.has_value() && (!current_->expiration.has_value() || now < refresh_at_)) return *current_;
  ++fetches_;
  absl::StatusOr<Credentials> got = fetch_();
  if (got.ok() && got->expiration.has_value() && *got->expiration <= now) {
    got = absl::UnauthenticatedError(StrCat(source_, ": the credentials handed out have expired already"));
  }
  if (!got.ok()) {
    if (current_.has_value() && current_->expiration.has_value() && now < *current_->expiration) {
      // Still valid: used until they expire, the source asked again a little later.
      refresh_at_ = std::min(now + kRetryFetchAfter, *current_->expiration);
      return *current_;
    }
    current_.reset();
    return got.status();
  }
  current_ = *std::move(got);
  if (current_->expiration.has_value()) refresh_at_ = RefreshTime(now, *current_->expiration);
  return *current_;
}

absl::StatusOr<SystemTime> ParseIso8601(std::string_view text) {
  const std::string_view s = text;
  size_t at = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  bool ok = Digits(s, &at, 4, &year) && Expect(s, &at, '-') && Digits(s, &at, 2, &month) && Expect(s, &at, '-') &&
            Digits(s, &at, 2, &day) && at < s.size() && (s[at] == 'T' || s[at] == 't' || s[at] == ' ');
  if (ok) ++at;
  ok = ok && Digits(s, &at, 2, &hour) && Expect(s, &at, ':') && Digits(s, &at, 2, &minute) && Expect(s, &at, ':') &&
       Digits(s, &at, 2, &second);
  int64_t nanos = 0;
  if (ok && at < s.size() && s[at] == '.') {
    ++at;
    int digits = 0;
    while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at]))) {
      if (digits < 9) nanos = nanos * 10 + (s[at] - '0');
      ++digits;
      ++at;
    }
    ok = digits > 0;
    for (int i = std::min(digits, 9); i < 9; ++i) nanos *= 10;
  }
  int offset_seconds = 0;
  if (ok && at < s.size()) {
    if (s[at] == 'Z' || s[at] == 'z') {
      ++at;
    } else if (s[at] == '+' || s[at] == '-') {
      const int sign = s[at] == '-' ? -1 : 1;
      ++at;
      int oh = 0, om = 0;
      ok = Digits(s, &at, 2, &oh);
      if (ok && at < s.size() && s[at] == ':') ++at;
      ok = ok && Digits(s, &at, 2, &om) && oh < 24 && om < 60;
      offset_seconds = sign * (oh * 3600 + om * 60);
    } else {
      ok = false;
    }
  }
  // Years the clock can hold (system_clock counts nanoseconds: about 1678 to 2262).
  ok = ok && at == s.size() && year >= 1900 && year <= 2200 && month >= 1 && month <= 12 && day >= 1 && day <= 31 &&
       hour < 24 && minute < 60 && second <= 60;
  if (!ok) return absl::InvalidArgumentError(StrCat("\"", text.substr(0, 64), "\" is not an ISO 8601 time"));
  const int64_t days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_seconds;
  return SystemTime(std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(seconds) +
                                                                                    std::chrono::nanoseconds(nanos)));
}

}  // namespace tfckpt::s3
