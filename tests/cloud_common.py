"""What the credential tests share: the cloud stub (tests/cloud_stub.py) started on loopback,
a hermetic environment (a fresh HOME, no metadata service but the test's), and botocore's
own resolution as the oracle (run in a child python3 with the same environment, printing
what it resolved with the secrets hashed, as tests/s3_resolve does for tfckpt).

Only loopback addresses, ever: every endpoint a test names is 127.0.0.1."""
import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Variables that change how credentials, regions and endpoints resolve: a test starts
# without any of them (the user's would leak in) and sets its own.
AWS_VARIABLES = [
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_SSO", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_NO_SIGN_REQUEST",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
    "AWS_EC2_METADATA_V1_DISABLED", "AWS_METADATA_SERVICE_TIMEOUT", "AWS_METADATA_SERVICE_NUM_ATTEMPTS",
    "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE",
    "CLOUDSDK_CONFIG", "AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "GS_ACCESS_KEY_ID", "GS_SECRET_ACCESS_KEY", "GCE_METADATA_HOST", "TFCKPT_GS_ENDPOINT_URL",
]


# The sockets of closed_endpoint, kept bound until the test process ends.
_bound_not_listening = []


def closed_endpoint():
    """http://127.0.0.1:PORT where nothing listens (a refused connection). The port stays
    bound by this process, never listening, until it exits: a port that was only free when
    asked could be taken by another test's server meanwhile (on a busy machine)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _bound_not_listening.append(s)
    return f"http://127.0.0.1:{s.getsockname()[1]}"


class Stub:
    """tests/cloud_stub.py in a child process, stopped at exit."""

    def __init__(self, work):
        self.config_path = os.path.join(work, "stub-config.json")
        self.log_path = os.path.join(work, "stub-log.jsonl")
        port_file = os.path.join(work, "stub.port")
        self.configure({})
        open(self.log_path, "w").close()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "cloud_stub.py"), self.config_path,
                                      self.log_path, port_file], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        atexit.register(self.stop)
        deadline = time.time() + 120  # a hang bound, not a timing expectation
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"cloud_stub did not start: {self.proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = f"http://127.0.0.1:{self.port}"

    def configure(self, config):
        with open(self.config_path + ".tmp", "w") as f:
            json.dump(config, f)
        os.replace(self.config_path + ".tmp", self.config_path)

    def log(self):
        with open(self.log_path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def clear_log(self):
        open(self.log_path, "w").close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def hermetic_env(home, **extra):
    """os.environ without any AWS/Google variable, HOME=home, no EC2 metadata service (a test
    that wants one names its endpoint), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARIABLES}
    env["HOME"] = home
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env.update({k: v for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
    return env


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


ORACLE = r"""
import hashlib, json, os, sys
import botocore.session
from botocore.config import Config
args = sys.argv[1:]
profile = args[args.index("--profile") + 1] if "--profile" in args else None
region_flag = args[args.index("--region") + 1] if "--region" in args else None
sha = lambda s: hashlib.sha256(s.encode()).hexdigest() if s else ""
session = botocore.session.Session(profile=profile)      # --profile, as the AWS CLI passes it
if region_flag:
    session.set_config_variable("region", region_flag)   # --region, likewise
out = {}
try:
    creds = session.get_credentials()
    # The other SDKs and the AWS CLI v2 read AWS_REGION first; botocore only AWS_DEFAULT_REGION.
    region = region_flag or os.environ.get("AWS_REGION") or session.get_config_variable("region") or "us-east-1"
    client = session.create_client("s3", region_name=region, config=Config(s3={"addressing_style": "path"}))
    out.update(region=region, endpoint=client.meta.endpoint_url)
    if creds is None:
        out["none"] = True
    else:
        f = creds.get_frozen_credentials()
        out.update(access_key_id=f.access_key, secret_sha256=sha(f.secret_key), token_sha256=sha(f.token or ""),
                   method=creds.method)
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def botocore_resolves(env, *flags):
    """What botocore resolves in `env` (with the AWS CLI's --profile/--region flags)."""
    p = subprocess.run([sys.executable, "-c", ORACLE, *flags], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def tfckpt_resolves(s3_resolve, env, *args, scheme="s3"):
    p = subprocess.run([s3_resolve, scheme, *args], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def new_home():
    d = tempfile.mkdtemp(prefix="tfckpt-creds-")
    atexit.register(lambda: subprocess.run(["rm", "-rf", d]))
    return d
