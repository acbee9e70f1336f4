"""Credentials never reach a file or a log written by vlrl.

vlrl itself never writes an API key, but servers do echo them: a 401 body that repeats the
``Authorization`` header, a proxy error that quotes the request URL with ``?api_key=``. Those texts
become failure records, quarantine reasons and log lines, which are kept and shared. So every error
text vlrl stores passes through :func:`redact`, the CLI installs :class:`RedactingFilter` on the
root logger, and :func:`find_credential` lets spec parsers refuse a credential outright instead of
carrying it into model names and caption records.

The patterns favour false positives (a redacted non-secret costs nothing) over misses.
"""

from __future__ import annotations

import logging
import re

MASK = "***"

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
    # user:password@host in URLs
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), rf"\g<1>{MASK}@"),
]


def redact(text: object) -> str:
    """``text`` with anything credential-like replaced by ``***`` (non-strings are ``str()``-ed)."""
    s = text if isinstance(text, str) else str(text)
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


def install_log_redaction() -> None:
    """Attach :class:`RedactingFilter` to every handler of the root logger (idempotent)."""
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
