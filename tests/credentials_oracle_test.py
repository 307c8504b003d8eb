#!/usr/bin/env python3
"""tfckpt resolves AWS credentials, regions and endpoints as botocore does (issue 28, B).
Usage: moto_server.sh python3 credentials_oracle_test.py S3_RESOLVE

For each configuration (the environment, shared files and profiles, credential_process,
role_arn with STS AssumeRole, web identity, SSO, container credentials, IMDS served by moto
and by the stub), tests/s3_resolve (the library's resolution) and botocore 1.43 (the
oracle, same environment) must find the same access key, session token (by SHA-256) and
region, and the same endpoint where one is configured. The services are moto
(MOTO_ENDPOINT: its EC2 instance metadata) and tests/cloud_stub.py (STS with deterministic
keys and SigV4 checks, the SSO portal, the container endpoint, IMDSv2 that insists on its
token), all on 127.0.0.1. The config file parser is compared with botocore's on generated
files too."""

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_tests, test, work_dir  # noqa: E402
from cloud_common import (Stub, botocore_resolves, closed_endpoint, hermetic_env, new_home,  # noqa: E402
                          tfckpt_resolves, write)

S3_RESOLVE = sys.argv[1]
MOTO = os.environ["MOTO_ENDPOINT"]
WORK = work_dir("tfckpt-oracle-")
STUB = Stub(WORK)
SOURCE_KEYS = {"AKIDSOURCE0001": "source-secret-1", "AKIDSOURCE0002": "source-secret-2"}
STUB.configure({"keys": SOURCE_KEYS, "container_token": "container-auth-token", "sso_token": "sso-access-token"})


def same(env, *flags, want_method=None, compare_endpoint=False):
    """Both resolve `env`; asserts they agree and that credentials were found; returns tfckpt's."""
    ours = tfckpt_resolves(S3_RESOLVE, env, *flags)
    theirs = botocore_resolves(env, *flags)
    assert "error" not in theirs and not theirs.get("none"), theirs
    assert "error" not in ours, ours
    for field in ("access_key_id", "secret_sha256", "token_sha256", "region"):
        assert ours[field] == theirs[field], (field, ours, theirs)
    if compare_endpoint:
        assert ours["endpoint"] == theirs["endpoint"].rstrip("/"), (ours, theirs)
    if want_method:
        assert theirs["method"] == want_method, theirs
    return ours


def home_with(config="", credentials=""):
    home = new_home()
    if config:
        write(os.path.join(home, ".aws", "config"), config)
    if credentials:
        write(os.path.join(home, ".aws", "credentials"), credentials)
    return home


@test()
def environment_keys_tokens_and_regions():
    home = home_with()
    env = hermetic_env(home, AWS_ACCESS_KEY_ID="AKIDENV", AWS_SECRET_ACCESS_KEY="env-secret",
                       AWS_SESSION_TOKEN="env-session", AWS_DEFAULT_REGION="eu-west-3")
    ours = same(env, want_method="env")
    assert ours["source"] == "environment (AWS_ACCESS_KEY_ID)", ours
    # The older AWS_SECURITY_TOKEN comes first; AWS_REGION over AWS_DEFAULT_REGION (the SDKs').
    same({**env, "AWS_SECURITY_TOKEN": "older-name", "AWS_REGION": "ap-south-2"}, want_method="env")
    # --region wins over both.
    same({**env, "AWS_REGION": "ap-south-2"}, "--region", "ca-central-1")


@test()
def shared_files_and_profiles():
    home = home_with(
        config="[default]\nregion = us-west-2\n[profile dev]\nregion = eu-central-1\n"
               "[profile cfgonly]\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = config-secret\n"
               "aws_session_token = config-token\nregion = sa-east-1\n"
               "[profile both]\naws_access_key_id = AKIDBOTHCONFIG\naws_secret_access_key = c\nregion = eu-north-1\n",
        credentials="[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n"
                    "[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = dev-secret\n"
                    "aws_session_token = dev-token\n"
                    "[both]\naws_access_key_id = AKIDBOTHCREDS\naws_secret_access_key = b\nregion = us-east-2\n")
    env = hermetic_env(home)
    same(env, want_method="shared-credentials-file")
    same({**env, "AWS_PROFILE": "dev"}, want_method="shared-credentials-file")
    same({**env, "AWS_PROFILE": "dev", "AWS_DEFAULT_PROFILE": "cfgonly"}, want_method="config-file")
    same({**env, "AWS_PROFILE": "both"})  # the credentials file's keys and region win
    # --profile: the environment's keys are not used; AWS_PROFILE does not do that.
    keyed = {**env, "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret"}
    same({**keyed, "AWS_PROFILE": "dev"}, want_method="env")
    same(keyed, "--profile", "dev", want_method="shared-credentials-file")
    # Files named by the variables, with ~ and $VAR in them.
    other = new_home()
    write(os.path.join(other, "creds"), "[default]\naws_access_key_id = AKIDMOVED\naws_secret_access_key = m\n")
    same({**env, "OTHER": other, "AWS_SHARED_CREDENTIALS_FILE": "$OTHER/creds"}, want_method="shared-credentials-file")


@test()
def credential_process_with_and_without_expiration():
    home = new_home()
    helper = write(os.path.join(home, "bin", "creds helper.py"), f"""import json, sys
print(json.dumps({{"Version": 1, "AccessKeyId": "AKIDPROC" + sys.argv[1], "SecretAccessKey": "proc-secret",
                   "SessionToken": "proc-token-" + sys.argv[1], "Expiration": "2099-01-01T00:00:00Z"}}))
""")
    write(os.path.join(home, ".aws", "config"),
          f"[default]\ncredential_process = {sys.executable} '{helper}' one\n"
          f"[profile static]\ncredential_process = \"{sys.executable}\" -c \"import json; print(json.dumps("
          f"{{'Version': 1, 'AccessKeyId': 'AKIDSTATIC', 'SecretAccessKey': 's'}}))\"\nregion = eu-south-1\n")
    env = hermetic_env(home)
    ours = same(env, want_method="custom-process")
    assert ours["access_key_id"] == "AKIDPROCone", ours
    same(env, "--profile", "static", want_method="custom-process")


@test()
def assume_role_from_a_source_profile_through_sts():
    home = home_with(
        config="[default]\nregion = eu-west-1\n"
               "[profile base]\naws_access_key_id = AKIDSOURCE0001\naws_secret_access_key = source-secret-1\n"
               "[profile role]\nrole_arn = arn:aws:iam::123456789012:role/reader\nsource_profile = base\n"
               "role_session_name = nightly\nexternal_id = ext-7\nduration_seconds = 1800\n"
               "[profile chained]\nrole_arn = arn:aws:iam::123456789012:role/second\nsource_profile = role\n"
               "[profile self]\nrole_arn = arn:aws:iam::123456789012:role/self\nsource_profile = self\n"
               "aws_access_key_id = AKIDSOURCE0002\naws_secret_access_key = source-secret-2\n"
               "[profile fromenv]\nrole_arn = arn:aws:iam::123456789012:role/env\ncredential_source = Environment\n")
    env = hermetic_env(home, AWS_ENDPOINT_URL_STS=STUB.url, AWS_DEFAULT_REGION="eu-west-1")  # (botocore's STS needs one)
    STUB.clear_log()
    for profile in ("role", "chained", "self"):
        ours = same(env, "--profile", profile, want_method="assume-role")
        assert ours["access_key_id"].startswith("ASIA"), ours
    same({**env, "AWS_ACCESS_KEY_ID": "AKIDSOURCE0002", "AWS_SECRET_ACCESS_KEY": "source-secret-2"},
         "--profile", "fromenv", want_method="assume-role")
    # STS checked every signature (both clients'): nothing was refused.
    sts = [e for e in STUB.log() if e["role"] == "sts"]
    assert sts and all(e["ok"] for e in sts), sts
    signers = {e["signed_by"] for e in sts}
    assert {"AKIDSOURCE0001", "AKIDSOURCE0002"} <= signers, signers
    assert any(s.startswith("ASIA") for s in signers), signers  # the chain: a role's keys assume the next


@test()
def web_identity_from_the_environment_and_from_a_profile():
    home = new_home()
    token = write(os.path.join(home, "token"), "eyJraWQiOi.web-identity-token.sig")
    env = hermetic_env(home, AWS_ENDPOINT_URL_STS=STUB.url, AWS_WEB_IDENTITY_TOKEN_FILE=token,
                       AWS_ROLE_ARN="arn:aws:iam::123456789012:role/irsa", AWS_ROLE_SESSION_NAME="pod-1",
                       AWS_REGION="us-east-2")
    same(env, want_method="assume-role-with-web-identity")
    write(os.path.join(home, ".aws", "config"),
          f"[profile web]\nweb_identity_token_file = {token}\nrole_arn = arn:aws:iam::123456789012:role/fromfile\n")
    bare = {k: v for k, v in env.items() if not k.startswith("AWS_ROLE") and k != "AWS_WEB_IDENTITY_TOKEN_FILE"}
    same({**bare, "AWS_PROFILE": "web"}, want_method="assume-role-with-web-identity")
    # Through moto's STS as well (its keys are random: tfckpt gets some, with a session token).
    ours = tfckpt_resolves(S3_RESOLVE, {**env, "AWS_ENDPOINT_URL_STS": MOTO})
    assert "error" not in ours and ours["access_key_id"] and ours["token_sha256"], ours


@test()
def sso_cached_tokens_and_the_portal():
    home = home_with(
        config="[profile sso]\nsso_session = corp\nsso_account_id = 111122223333\nsso_role_name = ReadOnly\n"
               "region = eu-west-1\n"
               "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = eu-west-1\n"
               "[profile legacy]\nsso_start_url = https://legacy.awsapps.com/start\nsso_region = us-east-1\n"
               "sso_account_id = 444455556666\nsso_role_name = Admin\n")
    token = json.dumps({"accessToken": "sso-access-token", "expiresAt": "2099-01-01T00:00:00Z",
                        "region": "eu-west-1", "startUrl": "https://corp.awsapps.com/start"})
    cache = os.path.join(home, ".aws", "sso", "cache")
    write(os.path.join(cache, hashlib.sha1(b"corp").hexdigest() + ".json"), token)
    write(os.path.join(cache, hashlib.sha1(b"https://legacy.awsapps.com/start").hexdigest() + ".json"), token)
    env = hermetic_env(home, AWS_ENDPOINT_URL_SSO=STUB.url)
    same(env, "--profile", "sso", want_method="sso")
    same(env, "--profile", "legacy", want_method="sso")
    # A token the portal does not take: tfckpt says to log in again.
    STUB.configure({"sso_token": "another", "keys": SOURCE_KEYS})
    try:
        ours = tfckpt_resolves(S3_RESOLVE, env, "--profile", "sso")
        assert "refused the cached token (HTTP 401): run aws sso login --sso-session corp" in ours["error"], ours
        assert "sso-access-token" not in json.dumps(ours), ours
    finally:
        STUB.configure({"keys": SOURCE_KEYS, "container_token": "container-auth-token", "sso_token": "sso-access-token"})


@test()
def container_credentials_with_the_authorization_token_file():
    home = new_home()
    token_file = write(os.path.join(home, "eks-pod-identity-token"), "container-auth-token")
    env = hermetic_env(home, AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{STUB.url}/container/pod",
                       AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token_file)
    ours = same(env, want_method="container-role")
    assert ours["source"] == f"container credentials {STUB.url}/container/pod", ours
    same({k: v for k, v in env.items() if k != "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"} |
         {"AWS_CONTAINER_AUTHORIZATION_TOKEN": "container-auth-token"}, want_method="container-role")
    # A wrong token: the endpoint refuses, and tfckpt says which endpoint (never the token).
    write(token_file, "wrong-token")
    ours = tfckpt_resolves(S3_RESOLVE, env)
    assert f"container credentials {STUB.url}/container/pod: HTTP 401" in ours["error"], ours
    assert "wrong-token" not in json.dumps(ours)


@test()
def instance_metadata_from_moto_and_from_an_imdsv2_that_insists_on_its_token():
    home = new_home()
    for endpoint in (MOTO, STUB.url):
        env = hermetic_env(home, AWS_EC2_METADATA_DISABLED=None, AWS_EC2_METADATA_SERVICE_ENDPOINT=endpoint)
        same(env, want_method="iam-role")
    imds = [e for e in STUB.log() if e["role"] == "imds"]
    assert imds and all(e["ok"] for e in imds), imds  # every GET carried the session token


@test()
def endpoints_from_services_sections_and_profiles():
    home = home_with(config="[default]\nregion = eu-west-1\nservices = local\n"
                            "aws_access_key_id = AKIDCFG\naws_secret_access_key = s\n"
                            "[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:9001\n"
                            "[profile plain]\nendpoint_url = http://127.0.0.1:9002\n"
                            "aws_access_key_id = AKIDPLAIN\naws_secret_access_key = s\n")
    env = hermetic_env(home)
    same(env, compare_endpoint=True)
    same({**env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9003"}, compare_endpoint=True)
    same({**env, "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9004", "AWS_ENDPOINT_URL": "http://127.0.0.1:9003"},
         compare_endpoint=True)
    same({**env, "AWS_PROFILE": "plain"}, compare_endpoint=True)
    ours = tfckpt_resolves(S3_RESOLVE, {**env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"})
    assert ours["endpoint"] == "https://s3.eu-west-1.amazonaws.com", ours


@test()
def nothing_found_is_an_error_listing_the_places_botocore_finds_nothing_either():
    home = new_home()
    env = hermetic_env(home, AWS_EC2_METADATA_DISABLED=None, AWS_EC2_METADATA_SERVICE_ENDPOINT=closed_endpoint())
    theirs = botocore_resolves(env)
    assert theirs.get("none"), theirs
    ours = tfckpt_resolves(S3_RESOLVE, env)
    assert ours["error"].startswith("no AWS credentials found; looked in the environment (AWS_ACCESS_KEY_ID)"), ours
    for place in (os.path.join(home, ".aws", "credentials"), "AWS_WEB_IDENTITY_TOKEN_FILE",
                  "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "EC2 instance metadata http://127.0.0.1:",
                  "--no-sign-request"):
        assert place in ours["error"], (place, ours)
    ours = tfckpt_resolves(S3_RESOLVE, env, "--no-sign-request")
    assert ours["access_key_id"] == "" and "--no-sign-request" in ours["source"], ours


# --- the config file parser against botocore's, on generated files

FRAGMENTS = [
    "[default]\n", "[profile a]\n", "[profile 'b c']\n", "[profile]\n", "[profile x y z]\n", "[sso-session s]\n",
    "[services svc]\n", "[DEFAULT]\n", "[ spaced ]\n", "[a]b]\n", "[preview]\n", "[profile \"q\"]\n",
    "region = eu-west-1\n", "Region: us-east-1\n", "key=value # not a comment\n", "# comment\n", "; comment\n",
    "\n", "  continued line\n", "s3 =\n  endpoint_url = http://127.0.0.1:1\n  addressing_style = path\n",
    "empty =\n", "x = 1\r\n", "y : two words\n", "\tindented = yes\n", "k = v = w\n", "ünï = cödé\n",
    "[profile a]\n", "region = eu-west-1\n", "bad line without delimiter\n", " = no name\n",
    "n =\n  no equals here\n", "region=\n", "services = svc\n",
]


def botocore_full_config(config, credentials):
    script = r"""
import json, sys
import botocore.configloader as c
try:
    full = c.load_config(sys.argv[1])
    for name, section in c.raw_config_parse(sys.argv[2]).items():
        full["profiles"].setdefault(name, {}).update(section)
    print(json.dumps({k: full[k] for k in ("profiles", "sso_sessions", "services")}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__}))
"""
    p = subprocess.run([sys.executable, "-c", script, config, credentials], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@test()
def config_files_parse_as_botocore_parses_them():
    rng = random.Random(28)
    d = tempfile.mkdtemp(dir=WORK)
    config, credentials = os.path.join(d, "config"), os.path.join(d, "credentials")
    agree = errors = 0
    for i in range(150):
        texts = ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 9))) for _ in range(2)]
        if rng.random() < 0.8:  # mostly files that start with a section
            texts = [rng.choice(FRAGMENTS[:12]) + t for t in texts]
        for path, text in zip((config, credentials), texts):
            with open(path, "w", newline="") as f:
                f.write(text)
        theirs = botocore_full_config(config, credentials)
        p = subprocess.run([S3_RESOLVE, "ini", config, credentials], capture_output=True, text=True, timeout=300)
        ours = json.loads(p.stdout)
        if "error" in theirs:
            assert "error" in ours, (texts, theirs, ours)
            errors += 1
        else:
            assert ours == theirs, (texts, theirs, ours)
            agree += 1
    assert agree > 20 and errors > 20, (agree, errors)


if __name__ == "__main__":
    sys.exit(run_tests(__import__("harness").TESTS, "credentials_oracle"))
