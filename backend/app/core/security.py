# SPDX-License-Identifier: Apache-2.0
"""Passwords and bearer tokens.

Passwords are hashed with scrypt (memory-hard, in the standard library). Access tokens are
`payload.signature` with an HMAC-SHA256 over a small JSON payload carrying the user id and an expiry,
so no session table is needed; the user is still loaded on every request so a deleted user or a role
change takes effect at once. Every secret comparison is constant-time.
"""

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt_hex, digest_hex = stored.split("$")
        if scheme != "scrypt":
            return False
        digest = hashlib.scrypt(
            password.encode(), salt=bytes.fromhex(salt_hex), n=int(n), r=int(r), p=int(p), dklen=len(digest_hex) // 2
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest.hex(), digest_hex)


# A hash of a random password: checking against it when the user does not exist keeps the time of a
# failed login independent of whether the username exists.
DUMMY_PASSWORD_HASH = hash_password(secrets.token_urlsafe(16))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def create_access_token(key: bytes, subject: str, minutes: int, now: float | None = None) -> str:
    at = now if now is not None else time.time()
    issued = int(at)
    # iat to the millisecond, so a token signed in just after a password reset is told apart from one before.
    payload = _b64(
        json.dumps({"sub": subject, "iat": round(at, 3), "exp": issued + minutes * 60}, separators=(",", ":")).encode()
    )
    sig = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())
    return f"{payload}.{sig}"


def decode_access_token(key: bytes, token: str, now: float | None = None) -> str | None:
    """Return the token's subject if its signature is valid and it has not expired, else None."""
    try:
        payload, sig = token.split(".")
        expected = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(sig, expected):
            return None
        claims = json.loads(_unb64(payload))
        if int(claims["exp"]) < (now if now is not None else time.time()):
            return None
        sub = claims["sub"]
        return sub if isinstance(sub, str) else None
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None


def token_expiry(key: bytes, token: str) -> float | None:
    """The expiry (Unix time) of a token whose signature is valid, else None."""
    if decode_access_token(key, token) is None:
        return None
    try:
        return float(json.loads(_unb64(token.split(".")[0]))["exp"])
    except (ValueError, KeyError, TypeError):
        return None


def token_issued_at(key: bytes, token: str) -> float | None:
    """When a token whose signature is valid was issued (Unix time), else None."""
    if decode_access_token(key, token) is None:
        return None
    try:
        return float(json.loads(_unb64(token.split(".")[0]))["iat"])
    except (ValueError, KeyError, TypeError):
        return None


def read_or_create_secret(path: Path, make: Callable[[], str]) -> str:
    """Read a secret file, creating it with mode 0600 on first use. Replicas sharing a data folder may
    start at once: the value is written to a file of this process's own and linked into place (a link
    fails if the name exists), so a reader never sees a created but still empty file, and every
    replica ends up with the one value that was linked first."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    value = make()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return path.read_text().strip()
    finally:
        tmp.unlink(missing_ok=True)
    return value
