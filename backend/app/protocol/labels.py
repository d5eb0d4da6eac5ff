# SPDX-License-Identifier: Apache-2.0
"""Host labels (role, region, rack, ...): the one rule set for labels an agent reports in Hello and labels
an admin sets over REST. At most MAX_LABELS; a key is 1-63 letters, digits, '.', '_', '-' or '/'; a value
is at most MAX_LABEL_VALUE characters without NUL or other control characters; a key appears once. A
breach raises InvalidLabels naming the label (by a short excerpt, never the whole value); the agents'
input check (app.protocol.agent_input) ends the stream with it, the REST routes answer 4xx with it."""

import re
from collections.abc import Iterable

MAX_LABELS = 32
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 255
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9._/-]{1,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidLabels(ValueError):
    """Labels that break a rule; str() is the reason."""


def _excerpt(value: str, limit: int = 40) -> str:
    return repr(value[:limit] + ("…" if len(value) > limit else ""))


def check_labels(pairs: Iterable[tuple[str, str]], what: str) -> dict[str, str]:
    """The labels as a dict, once every rule holds (InvalidLabels otherwise)."""
    out: dict[str, str] = {}
    for n, (key, value) in enumerate(pairs, start=1):
        if n > MAX_LABELS:
            raise InvalidLabels(f"{what} has more than {MAX_LABELS} labels")
        if len(key) > MAX_LABEL_KEY:
            raise InvalidLabels(f"{what}: a label key is {len(key)} characters long (at most {MAX_LABEL_KEY})")
        if not LABEL_KEY_RE.match(key):
            raise InvalidLabels(
                f"{what}: label key {_excerpt(key)} must be 1 to {MAX_LABEL_KEY} letters, digits, '.', '_', '-' or '/'"
            )
        if len(value) > MAX_LABEL_VALUE:
            raise InvalidLabels(f"{what}: label {key} is {len(value)} characters long (at most {MAX_LABEL_VALUE})")
        if _CONTROL.search(value):
            raise InvalidLabels(f"{what}: label {key} contains a NUL or control character: {_excerpt(value)}")
        if key in out:
            raise InvalidLabels(f"{what}: label {key} is given twice")
        out[key] = value
    return out


def parse_selector(selector: str) -> tuple[str, str]:
    """A label filter `key=value` as (key, value), by the same rules."""
    key, sep, value = selector.partition("=")
    if not sep:
        raise InvalidLabels(f"label filter {_excerpt(selector)} must be key=value")
    check_labels([(key, value)], "label filter")
    return key, value
