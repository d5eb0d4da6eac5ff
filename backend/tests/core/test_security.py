# SPDX-License-Identifier: Apache-2.0
"""Password hashing and signed tokens."""

from app.core.security import (
    create_access_token,
    decode_access_token,
    hash_password,
    verify_password,
)


def test_password_hash_verifies_only_the_right_password():
    h = hash_password("correct horse")
    assert h.startswith("scrypt$")
    assert verify_password("correct horse", h)
    assert not verify_password("correct horsE", h)
    assert not verify_password("x", "garbage")


def test_token_round_trip_expiry_and_tampering():
    key = b"k" * 32
    t = create_access_token(key, "user-1", minutes=1, now=1000)
    assert decode_access_token(key, t, now=1010) == "user-1"
    assert decode_access_token(key, t, now=1000 + 61) is None
    assert decode_access_token(b"other" * 8, t, now=1010) is None
    payload, sig = t.split(".")
    assert decode_access_token(key, payload + "x." + sig, now=1010) is None
    assert decode_access_token(key, "not-a-token") is None
