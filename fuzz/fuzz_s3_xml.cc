// What an object store or STS answers, parsed as the client parses it (xml.h, pugixml):
// error documents, ListObjectsV2 and ListMultipartUploads pages, the upload id of
// InitiateMultipartUpload, STS AssumeRole(WithWebIdentity) answers and their errors.
// Input: an answer body. Seeds: real answers of Swift's s3api, moto and STS.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_util.h"
#include "kvstore/s3/xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tfckpt::s3;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)ParseError(body);
  if (auto page = ParseListObjectsV2(body); page.ok()) {
    // A page that says it is truncated names the next one (the client would loop otherwise).
    if (page->truncated && page->next_token.empty()) std::abort();
  }
  (void)ParseListMultipartUploads(body);
  (void)ParseUploadId(body);
  if (auto sts = ParseStsCredentials(body); sts.ok()) {
    if (sts->access_key_id.empty() || sts->secret_access_key.empty() || sts->session_token.empty()) std::abort();
  }
  return 0;
}
