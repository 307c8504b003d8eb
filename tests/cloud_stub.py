#!/usr/bin/env python3
"""The credential services of AWS and Google Cloud that moto does not serve (or serves with
random keys), played on 127.0.0.1 for the credential tests: one HTTP server, many roles.

Usage: cloud_stub.py CONFIG_JSON LOG_FILE PORT_FILE

It listens on a free loopback port (written to PORT_FILE once it accepts) and reads
CONFIG_JSON again for every request, so that a test can change it between runs:

  {"keys": {"ACCESS_KEY_ID": "secret", ...},    # sources whose SigV4 signatures STS checks
                                                 # (besides the keys it handed out itself)
   "ttl": 3600,                                  # lifetime of what it hands out (seconds)
   "unique": false,                              # a new key and token for every request
   "container_token": "...",                     # the Authorization the container endpoint wants
   "sso_token": "...",                           # the bearer token the SSO portal wants
   "google": {"CLIENT_EMAIL": "PUBLIC KEY PEM"}, # service accounts the token endpoint knows
   "refresh_tokens": {"CLIENT_ID": ["CLIENT_SECRET", "REFRESH_TOKEN"]}}

Roles (every answer's credentials are a function of the request, so that botocore and
tfckpt asking the same thing get the same keys, unless "unique"):
  POST /  Action=AssumeRole             STS: checks the SigV4 signature against "keys"
          Action=AssumeRoleWithWebIdentity   STS: unsigned, the token is part of the key
  GET  /federation/credentials          the SSO portal (x-amz-sso_bearer_token)
  GET  /container/NAME                  container credentials (Authorization)
  PUT  /latest/api/token, GET /latest/meta-data/iam/security-credentials/[ROLE]
                                        EC2 IMDSv2: the GETs need the token (401 without)
  POST /token                           Google's token endpoint: a JWT bearer assertion
                                        (RS256, checked with the account's public key; aud
                                        must be this URL) or a refresh token
  GET  /computeMetadata/v1/instance/service-accounts/default/token   the GCE metadata server

Every request is logged to LOG_FILE as a JSON line: time, method, path, role, ok, and what
was handed out (access key id, session token or access token, expiration), or why not.
Refusals are HTTP errors in each service's own form. Standard library plus `cryptography`
(for RS256), which the pyenv python3 that runs moto has.
"""
import base64
import datetime
import hashlib
import hmac
import itertools
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

CONFIG, LOG, PORT_FILE = sys.argv[1:4]
lock = threading.Lock()
counter = itertools.count(1)
imds_tokens = set()
issued = {}  # access key id -> secret of what it handed out: STS takes those as sources too


def config():
    with open(CONFIG) as f:
        return json.load(f)


def log(entry):
    entry["time"] = time.time()
    with lock:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def issue(cfg, *parts):
    """Credentials derived from `parts` (or unique), valid for cfg["ttl"] seconds."""
    if cfg.get("unique"):
        parts = parts + (str(next(counter)),)
    h = hashlib.sha256("|".join(parts).encode()).hexdigest()
    expires = time.time() + cfg.get("ttl", 3600)
    c = {"AccessKeyId": "ASIA" + h[:16].upper(), "SecretAccessKey": "secret-" + h[16:40],
         "SessionToken": "token-" + h[40:64], "Expiration": iso(expires), "expires": expires}
    with lock:
        issued[c["AccessKeyId"]] = c["SecretAccessKey"]
    return c


def sigv4_ok(handler, body, keys):
    """Checks the request's SigV4 Authorization header; (ok, access key id or why not)."""
    auth = handler.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return False, "unsigned"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    key_id, date, region, service, _ = fields["Credential"].split("/")
    if key_id not in keys:
        return False, f"unknown key {key_id}"
    signed = fields["SignedHeaders"].split(";")
    url = urllib.parse.urlsplit(handler.path)
    query = "&".join(sorted(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in urllib.parse.parse_qsl(url.query, keep_blank_values=True)))
    canonical_headers = "".join(f"{h}:{' '.join(handler.headers.get(h, '').split())}\n" for h in signed)
    payload = hashlib.sha256(body).hexdigest()
    canonical = "\n".join([handler.command, url.path or "/", query, canonical_headers, ";".join(signed), payload])
    amz_date = handler.headers.get("x-amz-date", "")
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + keys[key_id]).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    want = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, fields["Signature"]):
        return False, "signature mismatch"
    return True, key_id


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n else b""

    def do_PUT(self):
        body = self.body()
        if self.path == "/latest/api/token":
            if not self.headers.get("x-aws-ec2-metadata-token-ttl-seconds"):
                log({"method": "PUT", "path": self.path, "role": "imds", "ok": False, "why": "no ttl header"})
                return self.reply(400, "")
            token = f"imds-token-{next(counter)}"
            with lock:
                imds_tokens.add(token)
            log({"method": "PUT", "path": self.path, "role": "imds", "ok": True, "token": token})
            return self.reply(200, token, "text/plain")
        self.reply(404, "")

    def do_GET(self):
        cfg = config()
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        entry = {"method": "GET", "path": self.path}
        if url.path == "/federation/credentials":
            entry["role"] = "sso"
            if self.headers.get("x-amz-sso_bearer_token") != cfg.get("sso_token"):
                log({**entry, "ok": False, "why": "bad token"})
                return self.reply(401, json.dumps({"message": "Session token not found or invalid"}))
            c = issue(cfg, "sso", q.get("account_id", ""), q.get("role_name", ""))
            log({**entry, "ok": True, "key": c["AccessKeyId"], "token": c["SessionToken"], "expires": c["expires"]})
            return self.reply(200, json.dumps({"roleCredentials": {
                "accessKeyId": c["AccessKeyId"], "secretAccessKey": c["SecretAccessKey"],
                "sessionToken": c["SessionToken"], "expiration": int(c["expires"] * 1000)}}))
        if url.path.startswith("/container/"):
            entry["role"] = "container"
            if self.headers.get("Authorization") != cfg.get("container_token"):
                log({**entry, "ok": False, "why": "bad authorization"})
                return self.reply(401, json.dumps({"message": "unauthorized"}))
            c = issue(cfg, "container", url.path)
            log({**entry, "ok": True, "key": c["AccessKeyId"], "token": c["SessionToken"], "expires": c["expires"]})
            return self.reply(200, json.dumps({"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
                                               "Token": c["SessionToken"], "Expiration": c["Expiration"]}))
        if url.path.startswith("/latest/meta-data/iam/security-credentials/"):
            entry["role"] = "imds"
            with lock:
                known = self.headers.get("x-aws-ec2-metadata-token") in imds_tokens
            if not known:
                log({**entry, "ok": False, "why": "no IMDSv2 token"})
                return self.reply(401, "")
            role = url.path[len("/latest/meta-data/iam/security-credentials/"):]
            if not role:
                log({**entry, "ok": True})
                return self.reply(200, "stub-role", "text/plain")
            c = issue(cfg, "imds", role)
            log({**entry, "ok": True, "key": c["AccessKeyId"], "token": c["SessionToken"], "expires": c["expires"]})
            return self.reply(200, json.dumps({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": c["AccessKeyId"],
                                               "SecretAccessKey": c["SecretAccessKey"], "Token": c["SessionToken"],
                                               "Expiration": c["Expiration"], "LastUpdated": iso(time.time())}))
        if url.path == "/computeMetadata/v1/instance/service-accounts/default/token":
            entry["role"] = "gce"
            if self.headers.get("Metadata-Flavor") != "Google":
                log({**entry, "ok": False, "why": "no Metadata-Flavor"})
                return self.reply(403, "")
            token = f"ya29.gce-{next(counter)}"
            ttl = cfg.get("ttl", 3600)
            log({**entry, "ok": True, "token": token, "expires": time.time() + ttl})
            return self.reply(200, json.dumps({"access_token": token, "expires_in": ttl, "token_type": "Bearer"}))
        log({**entry, "role": "?", "ok": False})
        self.reply(404, "")

    def do_POST(self):
        cfg = config()
        raw = self.body()
        form = dict(urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True))
        entry = {"method": "POST", "path": self.path}
        if self.path == "/token":
            return self.google_token(cfg, form, entry)
        action = form.get("Action", "")
        entry["role"] = "sts"
        entry["action"] = action
        arn, session = form.get("RoleArn", ""), form.get("RoleSessionName", "")
        # A default session name holds the time: not part of the keys.
        named = "" if session.startswith(("botocore-session-", "tfckpt-session-")) else session
        extra = "|".join(form.get(k, "") for k in ("ExternalId", "DurationSeconds"))
        if action == "AssumeRole":
            with lock:
                keys = {**issued, **cfg.get("keys", {})}
            ok, who = sigv4_ok(self, raw, keys)
            if not ok:
                log({**entry, "ok": False, "why": who})
                return self.sts_error(403, "SignatureDoesNotMatch" if who == "signature mismatch" else "InvalidClientTokenId", who)
            entry["signed_by"] = who
            c = issue(cfg, "assume", arn, who, named, extra)
        elif action == "AssumeRoleWithWebIdentity":
            token = form.get("WebIdentityToken", "")
            if not token or "Authorization" in self.headers:
                log({**entry, "ok": False, "why": "no token or signed"})
                return self.sts_error(400, "InvalidIdentityToken", "no web identity token")
            c = issue(cfg, "web", arn, hashlib.sha256(token.encode()).hexdigest(), named)
        else:
            log({**entry, "ok": False, "why": "unknown action"})
            return self.sts_error(400, "InvalidAction", action)
        log({**entry, "ok": True, "role_arn": arn, "session": session, "key": c["AccessKeyId"],
             "token": c["SessionToken"], "expires": c["expires"]})
        self.reply(200, f"""<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><{action}Result>
<Credentials><AccessKeyId>{c["AccessKeyId"]}</AccessKeyId><SecretAccessKey>{c["SecretAccessKey"]}</SecretAccessKey>
<SessionToken>{c["SessionToken"]}</SessionToken><Expiration>{c["Expiration"]}</Expiration></Credentials>
<AssumedRoleUser><Arn>{arn}/{session}</Arn><AssumedRoleId>AROA:{session}</AssumedRoleId></AssumedRoleUser>
</{action}Result><ResponseMetadata><RequestId>stub</RequestId></ResponseMetadata></{action}Response>""", "text/xml")

    def sts_error(self, status, code, message):
        self.reply(status, f"""<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>
<Code>{code}</Code><Message>{message}</Message></Error><RequestId>stub</RequestId></ErrorResponse>""", "text/xml")

    def google_token(self, cfg, form, entry):
        entry["role"] = "google"
        grant = form.get("grant_type", "")
        entry["grant"] = grant

        def refuse(why):
            log({**entry, "ok": False, "why": why})
            self.reply(400, json.dumps({"error": "invalid_grant", "error_description": why}))

        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            try:
                head, claims, sig = form["assertion"].split(".")
                header, body = json.loads(b64url_decode(head)), json.loads(b64url_decode(claims))
            except (KeyError, ValueError):
                return refuse("malformed JWT")
            pem = cfg.get("google", {}).get(body.get("iss", ""))
            if pem is None:
                return refuse("unknown service account")
            if header.get("alg") != "RS256":
                return refuse("not RS256")
            key = serialization.load_pem_public_key(pem.encode())
            try:
                key.verify(b64url_decode(sig), f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
            except InvalidSignature:
                return refuse("Invalid JWT Signature.")
            port = self.server.server_address[1]
            if body.get("aud") != f"http://127.0.0.1:{port}/token":
                return refuse("wrong audience")
            if body.get("exp", 0) - body.get("iat", 0) != 3600 or abs(body.get("iat", 0) - time.time()) > 300:
                return refuse("bad iat/exp")
            entry["iss"], entry["scope"] = body["iss"], body.get("scope")
        elif grant == "refresh_token":
            want = cfg.get("refresh_tokens", {}).get(form.get("client_id", ""))
            if want != [form.get("client_secret"), form.get("refresh_token")]:
                return refuse("unknown client or refresh token")
        else:
            return refuse("unsupported grant")
        token = f"ya29.stub-{next(counter)}"
        ttl = cfg.get("ttl", 3600)
        log({**entry, "ok": True, "token": token, "expires": time.time() + ttl})
        self.reply(200, json.dumps({"access_token": token, "expires_in": ttl, "token_type": "Bearer"}))


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
