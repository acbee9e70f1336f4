"""Credentials never reach a file or a log written by vlrl.

vlrl itself never writes an API key, but servers do echo them: a 401 body that repeats the
``Authorization`` header, a proxy error that quotes the request URL with ``?api_key=``. Those texts
become failure records, quarantine reasons and log lines, which are kept and shared. So every error
text vlrl stores passes through :func:`redact`, the CLI installs :class:`RedactingFilter` on the
root logger, and :func:`find_credential` lets spec parsers refuse a credential outright instead of
carrying it into model names and caption records.

Patterns alone miss a key that has no telltale shape (a proxy's random token, a key pasted without
``Bearer``), so redaction is also **by value**: the values of the environment variables that hold
secrets (:data:`SECRET_ENV_VARS`, plus every ``api_key_env=`` a backend spec names, registered with
:func:`register_secret_env`) are replaced wherever they appear. :func:`scrub` does only that (cheap
enough for every line a writer commits, and it never touches ordinary text); :func:`redact` does
both. The patterns favour false positives (a redacted non-secret costs nothing) over misses.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys

MASK = "***"

SECRET_ENV_VARS: set[str] = {
    "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "WANDB_API_KEY",
    "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "VLLM_API_KEY",
}  # fmt: skip
"""Environment variables whose values are secrets (grown by :func:`register_secret_env`)."""

MIN_SECRET_LEN = 6
"""Values this long are masked wherever they appear, even inside a word."""

MIN_SHORT_SECRET_LEN = 3
"""Values of 3 to 5 characters are masked only where they stand alone (between non-word characters),
so a key ``abc12`` is hidden in ``key abc12 rejected`` without maiming ``xabc12y``. Shorter values
cannot be told from ordinary text at all: they are left and named once in a warning."""

PLACEHOLDERS = frozenset({"EMPTY", "none", "None", "null", "dummy", "token", "key"})
"""Values that servers are given as "no key" (vLLM's ``EMPTY``): not secrets, never masked."""

_warned_short: set[str] = set()


def register_secret_env(name: str) -> None:
    """Treat the value of environment variable ``name`` as a secret from now on (a backend's
    ``api_key_env``); the value is read when text is redacted, so a key set later is covered too."""
    if name:
        SECRET_ENV_VARS.add(name)


def _configured() -> set[str]:
    vals = set()
    for n in SECRET_ENV_VARS:
        v = os.environ.get(n) or ""
        if not v or v in PLACEHOLDERS:
            continue
        if len(v) < MIN_SHORT_SECRET_LEN and n not in _warned_short:
            _warned_short.add(n)
            logging.getLogger(__name__).warning(
                "%s holds a value of %d character(s): too short to be masked in written text", n, len(v)
            )
        vals.add(v)
    return vals


def secret_values() -> list[str]:
    """The secrets to mask anywhere by value, longest first (so a key that contains another is masked
    whole)."""
    return sorted((v for v in _configured() if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)


def short_secret_values() -> list[str]:
    """The secrets of 3 to 5 characters, masked only where they stand alone (see
    :data:`MIN_SHORT_SECRET_LEN`)."""
    return sorted((v for v in _configured() if MIN_SHORT_SECRET_LEN <= len(v) < MIN_SECRET_LEN), key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with the value of every configured secret replaced by ``***`` (no patterns), as it
    is and as JSON writes it inside a string (a key with a quote or backslash is escaped there)."""
    for v in secret_values():
        for form in {v, json.dumps(v)[1:-1]}:
            if form in text:
                text = text.replace(form, MASK)
    for v in short_secret_values():
        for form in {v, json.dumps(v)[1:-1]}:
            if form in text:
                text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(form)}(?![A-Za-z0-9_])", MASK, text)
    return text


# (pattern, replacement): the replacement keeps the name so the reader knows what was there.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer xyz / Basic xyz (headers echoed in error bodies)
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*[\"']?)(?:bearer|basic|token)?\s*[^\s\"',;}]+"), rf"\g<1>{MASK}"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\g<1> {MASK}"),
    # api_key=..., "api-key": "...", x-api-key: ..., token=..., secret=..., password=...
    (
        re.compile(
            r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd|client[_-]?secret)"
            r"(\"?\s*[:=]\s*[\"']?)[^\s\"'&,;}]+"
        ),
        rf"\g<1>\g<2>{MASK}",
    ),
    # provider key shapes: sk-..., sk-proj-..., hf_..., ghp_..., xoxb-..., AKIA...
    (re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{10,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{10,}"), MASK),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{8,}"), MASK),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),
    # user:password@host and token@host in URLs
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/\s@]+@"), rf"\g<1>{MASK}@"),
]


def redact(text: object) -> str:
    """``text`` with anything credential-like replaced by ``***`` (non-strings are ``str()``-ed)."""
    s = scrub(text if isinstance(text, str) else str(text))
    for pat, rep in _PATTERNS:
        s = pat.sub(rep, s)
    return s


def find_credential(text: str) -> bool:
    """Whether ``text`` holds something :func:`redact` would hide."""
    return redact(text) != text


class RedactingFilter(logging.Filter):
    """Redacts every record's rendered message (installed on the handlers of the root logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logging's problem, not ours
            return True
        clean = redact(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        return True


class ScrubbingStream:
    """A text stream that :func:`scrub`-s what is written through it: the last line of defence for
    what never passes a logger (a traceback, a library's ``print``, a progress bar's postfix)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(scrub(s))  # type: ignore[attr-defined]
        return len(s)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def writelines(self, lines: object) -> None:
        for line in lines:  # type: ignore[attr-defined]
            self.write(line)


def install_log_redaction() -> None:
    """Attach :class:`RedactingFilter` to every handler of the root logger and scrub ``sys.stderr``
    and ``sys.stdout`` by value (idempotent)."""
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
        stream = getattr(h, "stream", None)
        if stream is not None and not isinstance(stream, ScrubbingStream) and stream in (sys.stderr, sys.stdout):
            h.stream = ScrubbingStream(stream)  # type: ignore[attr-defined]
    for name in ("stderr", "stdout"):
        stream = getattr(sys, name)
        if not isinstance(stream, ScrubbingStream):
            setattr(sys, name, ScrubbingStream(stream))
