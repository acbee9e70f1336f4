"""Wire-level helpers of the OpenAI-compatible backend: images as data URLs, reading replies
(logprobs, malformed bodies), retry classification and error text.

Kept apart from :mod:`vlrl.core.backends.openai_http` (the client and its fallbacks) so each stays
readable; everything public here is re-exported there.
"""

from __future__ import annotations

import asyncio
import base64
import io
import math
import os
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from vlrl.core.backends.base import SamplingParams, answer_problem, choice_of_token

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# -- module helpers (public ones are tested directly) ------------------------------------------------


def image_data_url(image: Any, fmt: str = "png") -> str:
    """A PIL image or path as a ``data:image/...;base64,`` URL (http(s)/data URLs pass through)."""
    if isinstance(image, str) and image.startswith(("http://", "https://", "data:")):
        return image
    from PIL import Image

    if not isinstance(image, Image.Image):
        try:
            from vlrl.core.images import load_image
        except ImportError:  # pragma: no cover - the loader module is part of vlrl
            image = Image.open(image).convert("RGB")
        else:
            image = load_image(image)
    buf = io.BytesIO()
    if fmt == "jpeg":
        image.convert("RGB").save(buf, format="JPEG", quality=95)
    else:
        image.save(buf, format="PNG")
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


_VIDEO_MIME = {".mp4": "video/mp4", ".m4v": "video/mp4", ".mov": "video/quicktime", ".webm": "video/webm",
               ".mkv": "video/x-matroska", ".avi": "video/x-msvideo", ".gif": "image/gif"}


_FORMAT_MIME = {"mov": "video/mp4", "matroska": "video/webm", "gif": "image/gif", "avi": "video/x-msvideo"}
"""FFmpeg demuxer name (the first of its aliases) → MIME type, for videos held as bytes."""


def video_data_url(video: Any) -> str:
    """A video file as a ``data:video/...;base64,`` URL, as vLLM's ``video_url`` parts take it (the
    server decodes and samples it with its own video loader); http(s)/data URLs pass through."""
    if isinstance(video, str) and video.startswith(("http://", "https://", "data:")):
        return video
    meta = getattr(video, "meta", None)
    if isinstance(meta, dict):  # a decoded Clip (vlrl.core.video) sends the file it came from, or its bytes
        if meta.get("data") is not None:
            mime = _FORMAT_MIME.get(str(meta.get("format", "")).split(",")[0], "video/mp4")
            return f"data:{mime};base64,{base64.b64encode(meta['data']).decode('ascii')}"
        video = meta.get("path", video)
    if not isinstance(video, (str, os.PathLike)):
        raise ValueError(f"an openai: backend sends video files, not {type(video).__name__} (give the video's path)")
    path = Path(video)
    mime = _VIDEO_MIME.get(path.suffix.lower(), "video/mp4")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _wire_part(p: dict[str, Any], image_format: str) -> dict[str, Any]:
    if p.get("type") == "image":
        return {"type": "image_url", "image_url": {"url": image_data_url(p["image"], image_format)}}
    if p.get("type") == "video":
        return {"type": "video_url", "video_url": {"url": video_data_url(p["video"])}}
    return p


def to_openai_messages(messages: Sequence[dict[str, Any]], image_format: str = "png") -> list[dict[str, Any]]:
    """vlrl's messages in the OpenAI wire layout: each ``{"type": "image", "image": ...}`` part becomes
    an ``image_url`` part with the image inlined as a data URL (the server never reads our disk), and
    each ``{"type": "video", "video": PATH}`` part a ``video_url`` part with the file inlined."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            m = dict(m, content=[_wire_part(p, image_format) for p in content])
        out.append(dict(m))
    return out


def top_logprobs_from_response(resp: Any) -> list[tuple[str, float]] | None:
    """The first generated token's alternatives ``[(token, logprob), ...]`` or None if absent.

    Accepts an ``openai`` ``ChatCompletion`` or the raw response JSON (vLLM/SGLang/OpenAI shape:
    ``choices[0].logprobs.content[0].top_logprobs``). The sampled token itself is included.
    """
    data = resp.model_dump() if hasattr(resp, "model_dump") else resp
    try:
        content = (data.get("choices") or [{}])[0].get("logprobs") or {}
        first = (content.get("content") or [None])[0]
    except (AttributeError, IndexError, TypeError):
        return None
    if not first:
        return None
    seen: dict[str, float] = {}
    for alt in first.get("top_logprobs") or []:
        if alt.get("token") is not None and alt.get("logprob") is not None:
            seen.setdefault(alt["token"], float(alt["logprob"]))
    if first.get("token") is not None and first.get("logprob") is not None:
        seen.setdefault(first["token"], float(first["logprob"]))
    return list(seen.items()) or None


def probs_from_top_logprobs(
    top: Sequence[tuple[str, float]], choices: Sequence[str], temperature: float = 1.0,
    tail_from: Sequence[tuple[str, float]] | None = None,
) -> tuple[dict[str, float], float]:
    """Probability of each choice at ``temperature`` from the first token's alternatives.

    Returns (probs renormalised over choices, unnormalised mass on the choices). Every token that
    reads as a choice (:func:`choice_of_token`: ``"A"``, ``" A"``, ``"\nA"``) adds to it, the rule
    the in-process backend applies to its full vocabulary.

    Servers return the model's own (temperature 1) logprobs, so the temperature is applied here:
    each alternative weighs ``exp(logprob / T)``. The normaliser needs the tokens the server did not
    list; their total probability is ``1 - sum(listed)``, and they are taken as spread over tokens
    no likelier than the least likely listed one (weight ``tail * p_min ** (1/T - 1)``). That is
    exact at T=1 and when the listed tokens hold (almost) all the mass, as on a letter answer.
    Temperature 0 is greedy: all mass on the most likely listed token.

    ``tail_from`` are the tokens the server itself listed, when ``top`` also holds looked-up ones
    (the exact letter route adds letters far below the list): only a listed token bounds the
    unlisted ones, so ``p_min`` is taken over these (default: ``top``).
    """
    mass_of = dict.fromkeys(choices, 0.0)
    live = [(tok, lp) for tok, lp in top if lp > -math.inf]
    if not live:
        return {c: 1.0 / len(choices) for c in choices}, 0.0
    if temperature <= 0:
        tok, _ = max(live, key=lambda t: t[1])
        c = choice_of_token(tok, choices)
        if c is None:
            return {c: 1.0 / len(choices) for c in choices}, 0.0
        return {k: float(k == c) for k in choices}, 1.0
    listed = sum(math.exp(lp) for _, lp in live)
    tail = max(0.0, 1.0 - listed)
    p_min = min(math.exp(lp) for _, lp in (tail_from or live) if lp > -math.inf)
    z = sum(math.exp(lp / temperature) for _, lp in live) + tail * p_min ** (1.0 / temperature - 1.0)
    for tok, lp in live:
        c = choice_of_token(tok, choices)
        if c is not None:
            mass_of[c] += math.exp(lp / temperature) / z
    mass = sum(mass_of.values())
    if mass <= 0:
        return {c: 1.0 / len(choices) for c in choices}, 0.0
    return {c: v / mass for c, v in mass_of.items()}, min(mass, 1.0)


class MalformedReply(Exception):
    """An HTTP 200 whose body breaks the chat-completions schema (retried like a 5xx)."""


def choice_text(choice: Any) -> Any:
    """The text of one reply choice: a chat message's content, or a text completion's ``text``."""
    msg = getattr(choice, "message", None)
    return getattr(msg, "content", None) if msg is not None else getattr(choice, "text", None)


def reply_problem(resp: Any, need_text: bool = False, completion: bool = False) -> str | None:
    """Why a chat-completions reply (``completion``: a ``/v1/completions`` one) cannot be used
    (None: it can).

    A server behind a misconfigured proxy can answer 200 with an HTML page, an empty ``choices``
    list or a ``content: null`` message. Read as an empty answer, that scores 0 and is cached as a
    real result; it is an error of that one request instead.
    """
    if isinstance(resp, (str, bytes)):
        head = " ".join(str(resp[:80] if isinstance(resp, str) else resp[:80].decode("latin-1")).split())
        return f"the reply is not JSON ({head!r})"
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list):
        return f"the reply has no 'choices' list ({type(resp).__name__})"
    if not choices:
        return "the reply has an empty 'choices' list"
    for c in choices:
        if completion:
            if not isinstance(getattr(c, "text", None), str):
                return "a reply choice has no text"
            continue
        msg = getattr(c, "message", None)
        if msg is None:
            return "a reply choice has no message"
        if getattr(msg, "content", None) is None:
            return "a reply choice has content null"
    if need_text:  # a generation, not a logprob probe: empty content or an error page is no answer
        return answer_problem([choice_text(c) for c in choices])
    return None


def retry_after_seconds(e: BaseException | None) -> float | None:
    """The server's ``Retry-After`` (seconds or an HTTP date) on a failed response, if any."""
    response = getattr(e, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        import email.utils
        import time

        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def tristate(v: Any) -> str:
    """A spec option's on/off/auto as ``on``/``off`` (``1``/``true``/``yes`` read as on), else as given."""
    v = str(v).lower()
    return "on" if v in _TRUE else "off" if v in _FALSE else v


def sampling_kwargs(sp: SamplingParams) -> dict[str, Any]:
    """The OpenAI chat-completion arguments of ``sp`` that every compatible server accepts."""
    kw: dict[str, Any] = {"max_tokens": sp.max_tokens, "temperature": sp.temperature, "top_p": sp.top_p}
    if sp.stop:
        kw["stop"] = list(sp.stop)
    return kw


def top_k_body(sp: SamplingParams) -> dict[str, Any] | None:
    return {"top_k": sp.top_k} if sp.top_k > 0 else None  # vLLM/SGLang extension; OpenAI has no top-k


def raw_prompt_body(sp: SamplingParams) -> dict[str, Any]:
    """Every sampling field of a raw-prompt completion, the engine extensions included, stated.

    A raw prompt is the parity route (the public CapRL reward's prompt, sampled by its engine with
    neutral SamplingParams: top_p 1, no top-k, no repetition penalty). ``vllm serve`` fills each
    field a request leaves out from the model's ``generation_config.json`` (its default
    ``--generation-config auto``; Qwen2.5 Instruct: top_k 20, repetition_penalty 1.05), which would
    sample another distribution than the one asked for. Only vLLM/SGLang-style servers take raw
    prompts at ``/v1/completions``, and both read these fields (-1: top-k off).
    """
    return {"top_k": sp.top_k if sp.top_k > 0 else -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}


def append_to_last_user(messages: list[dict], prefix: str) -> list[dict]:
    """``messages`` with ``prefix`` appended to the last user turn: for servers that cannot continue
    an assistant turn, the answer prefix is asked for in the question instead."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                m["content"] = [*c, {"type": "text", "text": "\n" + prefix.rstrip()}]
            else:
                m["content"] = f"{c or ''}\n{prefix.rstrip()}"
            return out
    return [*out, {"role": "user", "content": prefix.rstrip()}]


def strip_prefix(text: str, prefix: str) -> str:
    """Drop an echoed prefix (``"The answer is B"`` → ``"B"``) so the choice is found first."""
    p, t = prefix.strip(), text.strip()
    return t[len(p):] if p and t.lower().startswith(p.lower()) else text


def is_retryable(e: BaseException) -> bool:
    """Whether a request failure may pass on its own (timeouts, 408/429/5xx, a malformed reply)."""
    import json

    import openai

    if isinstance(e, (MalformedReply, json.JSONDecodeError)):
        return True
    if isinstance(e, (openai.APITimeoutError, openai.APIConnectionError, asyncio.TimeoutError, TimeoutError)):
        return True
    if isinstance(e, openai.APIStatusError):
        return e.status_code in (408, 429) or e.status_code >= 500
    return False


def describe_error(e: BaseException | None, timeout: float) -> str:
    """A request failure as one short line for a failure record (the SDK's own texts are long)."""
    import openai

    if isinstance(e, (openai.APITimeoutError, asyncio.TimeoutError, TimeoutError)):
        return f"timed out after {timeout:g}s"
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e.__context__
        return f"connection error ({one_line(cause) if cause else 'no response'})"
    if isinstance(e, openai.APIStatusError):
        return f"HTTP {e.status_code}: {one_line(_error_text(e))}"
    if isinstance(e, MalformedReply):
        return f"malformed reply: {one_line(e)}"
    if type(e).__name__ == "JSONDecodeError":
        return f"malformed reply: the body is not valid JSON ({one_line(e)})"
    return f"{type(e).__name__}: {one_line(e)}"


def _error_text(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)
    return str(getattr(e, "message", e))


def one_line(x: Any, limit: int = 300) -> str:
    """``str(x)`` on one line of at most ``limit`` characters (error texts end in JSONL records)."""
    s = " ".join(str(x).split()) or type(x).__name__
    return s if len(s) <= limit else s[: limit - 3] + "..."


async def gather_all(coros: list[Awaitable[Any]]) -> list[Any]:
    """Run the requests of one batch concurrently, results in order."""
    return list(await asyncio.gather(*coros))


async def gather_or_raise(coros: list[Awaitable[Any]]) -> list[Any]:
    """Gather letting every request finish, then raise the first failure (if any)."""
    if not coros:
        return []
    out = await asyncio.gather(*coros, return_exceptions=True)
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return list(out)


def assistant_tail(messages: list[dict]) -> str | None:
    """The text of a trailing assistant message (a pre-fill to continue), else None."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    content = messages[-1].get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None
