// How a curl request is given its method and body, the same for the object store client
// (client.h) and the credential services' exchanges (http_fetch.h).
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <string_view>

namespace tfckpt::s3 {

// A request body curl reads through callbacks (PUT): `bytes` from `sent` on. Curl may
// rewind it (it sends a request again whose reused connection had closed).
struct UploadBody {
  std::string_view bytes;
  size_t sent = 0;
};

// Sets the method of the request on `h`: HEAD without a body; PUT an upload of `body`
// (read from it through callbacks; `body` must outlive the transfer); POST `body`->bytes
// as the request's fields (read in place); GET as it is; any other as a custom request.
// REQUIRES: `body` is non-null for PUT and POST.
void SetRequestMethod(CURL* h, const char* method, UploadBody* body);

}  // namespace tfckpt::s3
