#include "kvstore/s3/curl_method.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace tfckpt::s3 {
namespace {

size_t OnUpload(char* buffer, size_t size, size_t n, void* arg) {
  auto* b = static_cast<UploadBody*>(arg);
  const size_t len = std::min(size * n, b->bytes.size() - b->sent);
  std::memcpy(buffer, b->bytes.data() + b->sent, len);
  b->sent += len;
  return len;
}

int OnSeek(void* arg, curl_off_t offset, int origin) {
  auto* b = static_cast<UploadBody*>(arg);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > b->bytes.size()) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  b->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

}  // namespace

void SetRequestMethod(CURL* h, const char* method, UploadBody* body) {
  const std::string_view m = method;
  if (m == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (m == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, OnUpload);
    curl_easy_setopt(h, CURLOPT_READDATA, body);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, OnSeek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, body);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body->bytes.size()));
  } else if (m == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->bytes.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->bytes.size()));
  } else if (m != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  }
}

}  // namespace tfckpt::s3
