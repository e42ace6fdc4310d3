"""``export --web-config FILE``: TLS and basic auth for ``/metrics``, in the web configuration file format of
the Prometheus exporters (node_exporter's ``--web.config.file``), so one file serves both:

.. code-block:: yaml

    tls_server_config:
      cert_file: /etc/gpu-triage/tls.crt
      key_file: /etc/gpu-triage/tls.key
      # client certificates: NoClientCert (default), VerifyClientCertIfGiven, RequireAndVerifyClientCert
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: /etc/gpu-triage/ca.crt
      min_version: TLS12              # TLS10 ... TLS13 (default TLS12)
    basic_auth_users:
      prometheus: $2b$12$...          # a bcrypt hash: htpasswd -nBC 12 "" | tr -d ':\\n'

The whole file is read and checked before anything starts: a key it does not know, a list or a map where a
string belongs, a certificate that does not load, a ``min_version`` above the ``max_version``, a password that
is not a bcrypt hash is one line naming the file and the key (a value from the file quoted cleaned, at most
80 characters), and exit 2.
The TLS context is the one prometheus_client's own ``start_http_server(certfile=..., keyfile=...)`` makes
(the standard library's server-side context, the client CA for client certificates, a minimum version);
basic auth is :class:`BasicAuth`, which the metrics server asks about each parsed request (prometheus_client
has none for its server).
Reading it needs PyYAML and bcrypt (``pip install 'gpu-triage[web]'``), imported only when a file is given.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.safetext import clean

log = logging.getLogger(__name__)

SHOWN = 80  # characters of a value from the file quoted in an error line

REALM = "gpu-triage"
MAX_FILE_BYTES = 1 << 20
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# exporter-toolkit's client_auth_type values that the standard library's ssl module can honour
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_TOP_KEYS = {"tls_server_config", "basic_auth_users"}
_AUTH_CACHE_MAX = 64  # (user, password digest) pairs that passed bcrypt: a scraper pays bcrypt once
BCRYPT_BURST_S = 2.0  # bcrypt time the server's thread may spend at once (the first scrapes after a start)
BCRYPT_SHARE = 0.2  # and over time at most this share of its time: the rest is for serving


@dataclass(frozen=True)
class WebConfig:
    """A checked web configuration: ``context`` is None without TLS, ``users`` empty without basic auth."""

    path: str
    context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash

    @property
    def tls(self) -> bool:
        return self.context is not None


class BasicAuth:
    """``Authorization: Basic`` checked against bcrypt hashes, on the metrics server's one loop thread.

    bcrypt is slow by design (~0.1-0.3 s a check at the usual costs), and the server answers every client
    from that one thread: checked on each scrape, one scraper would stall all the others for that long
    every time. So a pair that passed is remembered, by a SHA-256 digest of the password (never the
    password itself), as exporter-toolkit caches them: every scrape sends the same pair, and after the
    first it costs one hash and a constant-time compare.

    A wrong password cannot be cached away (each one is new), and anyone who can reach the port can send
    them. So the time spent in bcrypt is budgeted: a bucket of :data:`BCRYPT_BURST_S` seconds, refilled at
    :data:`BCRYPT_SHARE` of the time that passes. With the bucket empty a pair not already known is not
    checked (:data:`BUSY`: the server answers 503, try again), while a known pair still passes: a flood of
    wrong passwords delays a scraper that was let in by the burst once and then by one check at most."""

    OK = "ok"
    DENIED = "denied"
    BUSY = "busy"

    def __init__(self, users: dict[str, bytes], *, clock: Callable[[], float] = time.monotonic) -> None:
        import bcrypt  # noqa: PLC0415 - checked importable when the file was read

        self._bcrypt = bcrypt
        self._users = users
        self._passed: dict[str, bytes] = {}  # user -> sha256 of the password that passed
        self._clock = clock
        self._budget = BCRYPT_BURST_S  # seconds of bcrypt the thread may spend now
        self._budget_at = clock()

    def check(self, header: str) -> str:
        """:data:`OK` when ``header`` (the Authorization header's value, "" without one) names a user and
        its password, :data:`DENIED` when not, :data:`BUSY` when it would take a bcrypt check the budget
        has no time for."""
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return self.DENIED
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return self.DENIED
        hashed = self._users.get(user)
        if not sep or hashed is None:
            return self.DENIED
        digest = hashlib.sha256(password.encode()).digest()
        known = self._passed.get(user)
        if known is not None and hmac.compare_digest(known, digest):
            return self.OK
        now = self._clock()
        self._budget = min(BCRYPT_BURST_S, self._budget + (now - self._budget_at) * BCRYPT_SHARE)
        self._budget_at = now
        if self._budget <= 0.0:
            return self.BUSY
        try:
            passed = self._bcrypt.checkpw(password.encode(), hashed)
        finally:
            done = self._clock()
            self._budget -= done - now
            self._budget_at = done
        if not passed:
            return self.DENIED
        if len(self._passed) >= _AUTH_CACHE_MAX:
            self._passed.clear()
        self._passed[user] = digest
        return self.OK


def _shown(value: object) -> str:
    """A value from the file as an error line quotes it: one line, cleaned, at most :data:`SHOWN` characters
    (a 5 MB string is not a 5 MB line), a list or a map said to be one."""
    if isinstance(value, str):
        text = repr(value[: SHOWN + 1])
        return clean(text if len(value) <= SHOWN else text[: SHOWN - 1] + "…'")
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'map'}"
    return clean(repr(value)[:SHOWN])


def _string(where: str, key: str, value: object, what: str) -> str:
    """``value`` when it is a string; one line when it is a list, a map or a number where a string belongs."""
    if not isinstance(value, str):
        raise UserError(f"{where}: {key} is {_shown(value)}: give {what}")
    return value


def load_web_config(path: str) -> WebConfig:
    """Read and check ``path``; every problem is a :class:`UserError` naming the file and the key."""
    where = f"--web-config {clean(path)}"
    try:
        import bcrypt  # noqa: PLC0415, F401 - optional: only a web config needs it
        import yaml  # noqa: PLC0415
    except ImportError as exc:
        missing = f"{exc.name} is missing"
        raise UserError(f"{where}: needs PyYAML and bcrypt ({missing}): pip install 'gpu-triage[web]'") from None
    p = Path(path)
    try:
        if not p.is_file():
            raise UserError(f"{where}: not a file: give the YAML web configuration file")
        raw = p.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise UserError(f"{where}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UserError(f"{where}: larger than 1 MiB: not a web configuration file")
    try:
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    # ValueError: an integer past Python's digit limit; RecursionError: lists nested thousands deep
    except (yaml.YAMLError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{where}: not valid YAML ({first[:160]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: the file must be a mapping with tls_server_config and/or basic_auth_users")
    unknown = sorted(_shown(str(k)).strip("'") for k in data if k not in _TOP_KEYS)
    if unknown:
        known = ", ".join(sorted(_TOP_KEYS))
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown[:5])}: gpu-triage reads {known}")
    context = _tls(where, p.parent, data.get("tls_server_config"))
    users = _users(where, data.get("basic_auth_users"))
    if users and context is None:
        log.warning("%s: basic auth without TLS sends the password in clear text", where)
    return WebConfig(path=path, context=context, users=users)


def _file(where: str, base: Path, key: str, value: object) -> str:
    value = _string(where, f"tls_server_config.{key}", value, "a file name")
    if not value:
        raise UserError(f"{where}: tls_server_config.{key} must be a file name")
    resolved = Path(value) if Path(value).is_absolute() else base / value  # relative to the config, as Go's
    try:
        is_file = resolved.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL in it
        is_file = False
    if not is_file:
        raise UserError(f"{where}: tls_server_config.{key}: {_shown(value)} is not a file")
    return str(resolved)


def _tls(where: str, base: Path, tls: object) -> ssl.SSLContext | None:
    if tls is None:
        return None
    if not isinstance(tls, dict):
        raise UserError(f"{where}: tls_server_config must be a mapping")
    unknown = sorted(_shown(str(k)).strip("'") for k in tls if k not in _TLS_KEYS)
    if unknown:
        raise UserError(
            f"{where}: tls_server_config: {', '.join(unknown[:5])} not supported by gpu-triage "
            f"(it reads {', '.join(sorted(_TLS_KEYS))}): remove them"
        )
    if "cert_file" not in tls or "key_file" not in tls:
        raise UserError(f"{where}: tls_server_config needs cert_file and key_file")
    cert = _file(where, base, "cert_file", tls["cert_file"])
    key = _file(where, base, "key_file", tls["key_file"])
    supported = ", ".join(_CLIENT_AUTH)
    auth = _string(where, "tls_server_config.client_auth_type", tls.get("client_auth_type", "NoClientCert"),
                   f"one of {supported}")
    if auth not in _CLIENT_AUTH:
        raise UserError(f"{where}: tls_server_config.client_auth_type {_shown(auth)}: gpu-triage supports {supported}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = {}
    names = ", ".join(_TLS_VERSIONS)
    for name in ("min_version", "max_version"):
        if name in tls:
            version = _string(where, f"tls_server_config.{name}", tls[name], f"one of {names}")
            if version not in _TLS_VERSIONS:
                raise UserError(f"{where}: tls_server_config.{name} {_shown(version)}: one of {names}")
            versions[name] = _TLS_VERSIONS[version]
    low, high = versions.get("min_version", ssl.TLSVersion.TLSv1_2), versions.get("max_version")
    if high is not None and low > high:  # accepted, every handshake would fail
        raise UserError(
            f"{where}: tls_server_config.min_version {_name(low)} is above max_version {_name(high)}: "
            "no TLS version is left; lower min_version or raise max_version"
        )
    ctx.minimum_version = versions.get("min_version", ssl.TLSVersion.TLSv1_2)
    if "max_version" in versions:
        ctx.maximum_version = versions["max_version"]
    try:
        ctx.load_cert_chain(certfile=cert, keyfile=key)
    except (ssl.SSLError, OSError) as exc:
        raise UserError(
            f"{where}: tls_server_config: cannot load {_shown(cert)} with {_shown(key)}: {clean(str(exc))}"
        ) from None
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if ctx.verify_mode != ssl.CERT_NONE:
        if "client_ca_file" not in tls:
            raise UserError(f"{where}: tls_server_config.client_auth_type {auth} needs client_ca_file")
        ca = _file(where, base, "client_ca_file", tls["client_ca_file"])
        try:
            ctx.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise UserError(f"{where}: tls_server_config.client_ca_file {_shown(ca)}: {clean(str(exc))}") from None
    return ctx


def _users(where: str, users: object) -> dict[str, bytes]:
    if users is None:
        return {}
    if not isinstance(users, dict) or not users:
        raise UserError(f"{where}: basic_auth_users must map user names to bcrypt hashes")
    out: dict[str, bytes] = {}
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise UserError(f"{where}: basic_auth_users: {_shown(user)} is not a user name (no ':' allowed)")
        if (
            not isinstance(hashed, str)
            or not hashed.isascii()
            or not hashed.startswith(("$2a$", "$2b$", "$2y$"))
            or len(hashed) != 60
        ):
            raise UserError(
                f"{where}: basic_auth_users.{_shown(user)}: {_shown(hashed)} is not a bcrypt hash "
                "(make one: htpasswd -nBC 12 \"\" | tr -d ':\\n')"
            )
        import bcrypt  # noqa: PLC0415 - checked importable by load_web_config

        try:  # a hash of the right shape whose salt does not decode would fail every scrape: fail here
            bcrypt.checkpw(b"", hashed.encode())
        except ValueError:
            why = "not a valid bcrypt hash (its salt does not decode)"
            raise UserError(f"{where}: basic_auth_users.{_shown(user)}: {why}") from None
        out[user] = hashed.encode()
    return out


def _name(version: ssl.TLSVersion) -> str:
    return next(name for name, v in _TLS_VERSIONS.items() if v == version)
