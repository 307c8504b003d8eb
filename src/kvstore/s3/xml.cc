#include "kvstore/s3/xml.h"

#include <pugixml.hpp>

#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

// The document's root element when it is named `root`.
absl::StatusOr<pugi::xml_node> Root(pugi::xml_document& doc, std::string_view body, const char* root) {
  const pugi::xml_parse_result r = doc.load_buffer(body.data(), body.size());
  if (!r) return absl::DataLossError(StrCat("unreadable ", root, " response: ", r.description()));
  pugi::xml_node node = doc.child(root);
  if (!node) return absl::DataLossError(StrCat("response is not a ", root, " document"));
  return node;
}

std::string Text(const pugi::xml_node& n, const char* child) { return n.child(child).text().as_string(); }

bool Truncated(const pugi::xml_node& n) { return n.child("IsTruncated").text().as_bool(); }

void XmlEscapeInto(std::string_view s, std::string* out) {
  for (char c : s) {
    switch (c) {
      case '&':
        *out += "&amp;";
        break;
      case '<':
        *out += "&lt;";
        break;
      case '>':
        *out += "&gt;";
        break;
      case '"':
        *out += "&quot;";
        break;
      default:
        *out += c;
    }
  }
}

}  // namespace

std::optional<S3Error> ParseError(std::string_view body) {
  pugi::xml_document doc;
  auto root = Root(doc, body, "Error");
  if (!root.ok()) return std::nullopt;
  return S3Error{Text(*root, "Code"), Text(*root, "Message"), Text(*root, "Region")};
}

absl::StatusOr<ListPage> ParseListObjectsV2(std::string_view body) {
  pugi::xml_document doc;
  auto root = Root(doc, body, "ListBucketResult");
  if (!root.ok()) return root.status();
  ListPage page;
  for (pugi::xml_node c : root->children("Contents")) {
    page.objects.push_back({Text(c, "Key"), c.child("Size").text().as_ullong(), Text(c, "ETag")});
  }
  for (pugi::xml_node c : root->children("CommonPrefixes")) page.common_prefixes.push_back(Text(c, "Prefix"));
  page.truncated = Truncated(*root);
  page.next_token = Text(*root, "NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    return absl::DataLossError("ListObjectsV2 response is truncated but has no NextContinuationToken");
  }
  return page;
}

absl::StatusOr<UploadsPage> ParseListMultipartUploads(std::string_view body) {
  pugi::xml_document doc;
  auto root = Root(doc, body, "ListMultipartUploadsResult");
  if (!root.ok()) return root.status();
  UploadsPage page;
  for (pugi::xml_node u : root->children("Upload")) page.uploads.push_back({Text(u, "Key"), Text(u, "UploadId"), Text(u, "Initiated")});
  page.truncated = Truncated(*root);
  page.next_key_marker = Text(*root, "NextKeyMarker");
  page.next_upload_id_marker = Text(*root, "NextUploadIdMarker");
  return page;
}

absl::StatusOr<std::string> ParseUploadId(std::string_view body) {
  pugi::xml_document doc;
  auto root = Root(doc, body, "InitiateMultipartUploadResult");
  if (!root.ok()) return root.status();
  std::string id = Text(*root, "UploadId");
  if (id.empty()) return absl::DataLossError("InitiateMultipartUploadResult has no UploadId");
  return id;
}

absl::StatusOr<std::string> ParseCopyPartEtag(std::string_view body) {
  pugi::xml_document doc;
  auto root = Root(doc, body, "CopyPartResult");
  if (!root.ok()) return root.status();
  std::string etag = Text(*root, "ETag");
  if (etag.empty()) return absl::DataLossError("CopyPartResult has no ETag");
  return etag;
}

std::string CompleteMultipartUploadXml(const std::vector<CompletedPart>& parts) {
  std::string out = "<CompleteMultipartUpload>";
  for (const CompletedPart& p : parts) {
    StrAppend(&out, "<Part><PartNumber>", p.number, "</PartNumber><ETag>");
    XmlEscapeInto(p.etag, &out);
    out += "</ETag></Part>";
  }
  out += "</CompleteMultipartUpload>";
  return out;
}

absl::StatusOr<StsCredentials> ParseStsCredentials(std::string_view body) {
  pugi::xml_document doc;
  const pugi::xml_parse_result r = doc.load_buffer(body.data(), body.size());
  if (!r) return absl::DataLossError(StrCat("unreadable STS answer: ", r.description()));
  if (pugi::xml_node err = doc.child("ErrorResponse").child("Error")) {
    const std::string type = Text(err, "Type");
    std::string message = StrCat("STS error ", Text(err, "Code"));
    if (const std::string m = Text(err, "Message"); !m.empty()) StrAppend(&message, ": ", m);
    return type == "Receiver" ? absl::UnavailableError(message) : absl::PermissionDeniedError(message);
  }
  pugi::xml_node root = doc.document_element();
  const std::string name = root.name();
  if (name != "AssumeRoleResponse" && name != "AssumeRoleWithWebIdentityResponse") {
    return absl::DataLossError("the answer is not an STS AssumeRole document");
  }
  const std::string result = name.substr(0, name.size() - 8) + "Result";  // "AssumeRoleResponse" -> "AssumeRoleResult"
  pugi::xml_node c = root.child(result.c_str()).child("Credentials");
  StsCredentials out{Text(c, "AccessKeyId"), Text(c, "SecretAccessKey"), Text(c, "SessionToken"), Text(c, "Expiration")};
  if (out.access_key_id.empty() || out.secret_access_key.empty() || out.session_token.empty() ||
      out.expiration.empty()) {
    return absl::DataLossError("the STS answer lacks AccessKeyId, SecretAccessKey, SessionToken or Expiration");
  }
  return out;
}

}  // namespace tfckpt::s3
