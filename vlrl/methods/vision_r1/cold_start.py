"""Vision-R1 cold start by modality bridging: reasoning traces for SFT that a VLM could not write alone.

Strong text reasoners (DeepSeek-R1) write long, self-checking chains of thought but cannot see
images; VLMs see images but reason briefly. Vision-R1 bridges the two per (image, question, answer):

1. The VLM writes a *pseudo chain of thought* for the solved problem (image, question and the
   correct answer in the prompt): a description of what matters plus reasoning to the answer.
2. The VLM, guided by that pseudo CoT, writes a detailed *description* that carries every fact the
   problem needs (but not the answer).
3. The text reasoner solves the problem from the description alone, in ``<think>…</think>
   <answer>…</answer>`` form.
4. A sample is kept only if the format is valid and the final answer matches the ground truth, with
   the *same* checker HFRRF uses in training (:func:`vlrl.methods.vision_r1.reward.check_answer`), so
   the SFT set never teaches an answer the RL reward would call wrong.
5. A description that *states* the answer ("the answer is 4", "option B is correct") is rejected
   (``answer_leak``): the reasoner would copy it instead of reasoning, and SFT would teach chains
   that lean on a fact the image does not show.
6. Optionally (``consistency_judge``) an LLM judge, through vlrl's structured-output seam
   (:func:`vlrl.judge.chat_structured`, prompt ``cold_start_consistency.jinja``), checks that the
   chain's steps support its final answer; inconsistent chains are rejected, as the paper filters
   logically inconsistent samples.

The SFT record holds the image, the question and the reasoner's chain as the target ``response``,
ready for ``vlrl train sft`` (``data.response_column: response``). SFT trains that chain against
the *image*, so wording that refers to the text the reasoner read ("According to the
description, …") is rewritten to image-grounded wording ("In the image, …") by :func:`ground_wording`.

**Transient errors are retried on rerun.** A VLM, reasoner or judge call that failed (timeout, 5xx,
empty choices) is not a verdict on the sample: it is counted (``retry``) and left undecided, so the
next run asks again. Only decisions (wrong answer, bad format, leak, inconsistency) are written to
``rejected.jsonl``.

Resumable and exactly-once: kept and rejected samples go to ``sft.jsonl`` / ``rejected.jsonl``
(:class:`~vlrl.core.pipeline.JsonlStore`, keyed by record id), unreadable records to
``quarantine.jsonl``; every model call goes through the response cache in ``<out>/cache``, so a
rerun after ``kill -9`` skips finished ids and replays in-flight calls for free.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import caption_images
from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, Quarantine, atomic_write_json, in_shard, parse_shard
from vlrl.core.prompts import render
from vlrl.core.stage import Outcome, run_stage

logger = logging.getLogger(__name__)


def choice_lines(choices: Any) -> list[str]:
    from vlrl.methods.vision_r1.reward import normalize_choices

    opts = normalize_choices(choices) if choices else []
    return [f"{chr(65 + i)}. {o}" for i, o in enumerate(opts)]


def normalize_reasoner_output(text: str) -> str:
    """R1-style servers often return the chain without its opening ``<think>``; restore it."""
    t = (text or "").strip()
    if "</think>" in t and "<think>" not in t:
        t = "<think>" + t
    return t


_LEAK = re.compile(
    r"\b(?:the\s+)?(?:final\s+|correct\s+)?answer\s*(?:is|:|=|would be|should be)"
    r"|\b(?:option|choice)\s*\(?[A-Z]\)?\s+is\s+(?:the\s+)?(?:correct|right|answer)"
    r"|\bcorrect\s+(?:option|choice)\s*(?:is|:)",
    re.IGNORECASE,
)


def answer_leak(description: str) -> bool:
    """Whether a description states the answer outright (not merely the facts that lead to it)."""
    return bool(_LEAK.search(description or ""))


_GROUNDING = (
    (re.compile(r"\b(?:according to|based on|from|as stated in|as given in|per) the (?:image )?description\b", re.I), "in the image"),
    (re.compile(r"\bthe description (?:says|states|mentions|shows|indicates|notes|tells us)\b", re.I), "the image shows"),
    (re.compile(r"\b(?:is|are|was|were) described as\b", re.I), "appears as"),
    (re.compile(r"\bthe (?:image )?description\b", re.I), "the image"),
    (re.compile(r"\bdescribed\b", re.I), "shown"),
)


def ground_wording(text: str) -> str:
    """Rewrite references to the description into references to the image, keeping sentence case.

    >>> ground_wording("According to the description, the square has 4 sides.")
    'In the image, the square has 4 sides.'
    """
    def cased(repl: str):
        def f(m: re.Match) -> str:
            return repl[0].upper() + repl[1:] if m.group(0)[0].isupper() else repl
        return f

    for pattern, repl in _GROUNDING:
        text = pattern.sub(cased(repl), text)
    return text


def judge_sample(response: str, gold: Any, choices: Any = None) -> tuple[bool, bool, str | None]:
    """(format_ok, answer_ok, predicted answer) with HFRRF's own parser and checker."""
    from vlrl.methods.vision_r1.reward import check_answer, extract_answer, split_think_answer

    if split_think_answer(response) is None:
        return False, False, None
    pred = extract_answer(response)
    return True, bool(check_answer(pred, gold, choices)), pred


def _vlm_step(backend: Any, sampling: SamplingParams, items: list[dict], key: str, rejected: JsonlStore,
              texts: list[str], retry: Counter, done: list[Outcome], leak_check: bool = False) -> list[dict]:
    """One VLM stage over ``items`` (image + text each): the answer goes to ``it[key]``; the items
    that got a non-empty answer go on. A failed call is transient (counted in ``retry``, asked again
    on the next run); an empty answer (``empty_<key>``) or, with ``leak_check``, one that states the
    answer (``answer_leak``) is rejected. The decided items' outcomes are added to ``done``."""
    outcomes = caption_images(backend, [it["img"] for it in items], texts, sampling, ids=[it["id"] for it in items],
                              min_words=None)
    live = []
    for it, oc in zip(items, outcomes, strict=True):
        text = (oc.caption or "").strip()
        if oc.caption is None:
            done.append(_transient(retry, it["id"], "vlm_error", oc.reason))
        elif not text:
            done.append(Outcome.ok(it["id"], {"id": it["id"], "reason": f"empty_{key}", "error": oc.reason}, to=rejected))
        elif leak_check and answer_leak(text):
            done.append(Outcome.ok(it["id"], {"id": it["id"], "reason": "answer_leak", key: text}, to=rejected))
        else:
            it[key] = text
            live.append(it)
    return live


def _transient(retry: Counter, rid: str, kind: str, why: Any) -> Outcome:
    """A failed model call: not a verdict on the sample, so it is written nowhere and retried by the next run."""
    retry[kind] += 1
    return Outcome.retry(rid, f"{kind}: {why or 'no answer'}")


def cold_start(
    source: str,
    vlm: Any,
    reasoner: Any,
    out: str | Path,
    *,
    batch_size: int = 16,
    max_samples: int | None = None,
    vlm_max_tokens: int = 1024,
    reasoner_max_tokens: int = 8192,
    temperature: float = 0.0,
    seed: int = 0,
    shard: str | None = None,
    image_root: str | None = None,
    consistency_judge: Any = None,
) -> dict[str, Any]:
    """Build the cold-start SFT set from ``source`` records (``image``, ``question``, ``answer``,
    optional ``choices``, ``id``). ``vlm``/``reasoner`` (and the optional ``consistency_judge``) are
    backend specs or Backends."""
    from vlrl.core.sources.rows import iter_source, open_record_image, record_image

    if isinstance(source, str) and not source.startswith("builtin:") and not Path(source).exists():
        raise ValueError(f"--input {source!r} does not exist")  # before two models are loaded
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shard_t = parse_shard(shard)
    kept = JsonlStore(out / "sft.jsonl")
    rejected = JsonlStore(out / "rejected.jsonl")
    quarantine = Quarantine(out / "quarantine.jsonl")
    backends: list[Any] = []  # loaded with the first batch that needs them: a finished job loads no model
    vlm_b = reasoner_b = judge_b = None
    retry: Counter = Counter()
    vlm_sp = SamplingParams(max_tokens=vlm_max_tokens, temperature=temperature, seed=seed)
    rsn_sp = SamplingParams(max_tokens=reasoner_max_tokens, temperature=temperature, seed=seed)
    root = image_root or (None if source.startswith("builtin:") else str(Path(source).parent))

    def records():
        n = 0
        for i, rec in enumerate(iter_source(source, cache_dir=out / "_data")):
            if max_samples is not None and n >= max_samples:
                return
            rid = str(rec.get("id", i))
            if in_shard(rid, shard_t):
                n += 1
                yield rid, rec

    def process(batch: list[tuple[str, dict]]) -> list[Outcome]:
        nonlocal vlm_b, reasoner_b, judge_b
        done: list[Outcome] = []
        items = []
        for rid, rec in batch:
            q, gold = rec.get("question"), rec.get("answer")
            if not isinstance(q, str) or not q.strip() or gold is None or str(gold).strip() == "":
                done.append(Outcome.fail(rid, "record needs a non-empty 'question' and 'answer'"))
                continue
            img, why = open_record_image(rec, root, rid)
            if why is not None:
                done.append(Outcome.fail(rid, why))
                continue
            items.append({"id": rid, "rec": rec, "img": img, "choices": choice_lines(rec.get("choices"))})
        if not items:
            return done
        if not backends:
            backends[:] = [load_backend(vlm, cache=out / "cache"), load_backend(reasoner, cache=out / "cache")]
            if consistency_judge is not None:
                backends.append(load_backend(consistency_judge, cache=out / "cache"))
            vlm_b, reasoner_b = backends[:2]
            judge_b = backends[2] if consistency_judge is not None else None

        live = _vlm_step(vlm_b, vlm_sp, items, "pseudo_cot", rejected, [
            render("cold_start_pseudo_cot", question=it["rec"]["question"], answer=str(it["rec"]["answer"]),
                   choices=it["choices"]) for it in items], retry, done)
        live2 = _vlm_step(vlm_b, vlm_sp, live, "description", rejected, [
            render("cold_start_description", question=it["rec"]["question"], pseudo_cot=it["pseudo_cot"]) for it in live],
            retry, done, leak_check=True)
        answers = reasoner_b.chat([
            ChatRequest([{"role": "user", "content": render("cold_start_reason", description=it["description"],
                                                            question=it["rec"]["question"], choices=it["choices"])}],
                        rsn_sp, id=it["id"])
            for it in live2
        ])
        verified = []
        for it, res in zip(live2, answers, strict=True):
            rec = it["rec"]
            if not res.ok:
                done.append(_transient(retry, it["id"], "reasoner_error", res.error))
                continue
            response = normalize_reasoner_output(res.text)
            truncated = bool(res.finish_reasons) and res.finish_reasons[0] == "length"
            fmt, ok, pred = judge_sample(response, rec["answer"], rec.get("choices"))
            base = {"id": it["id"], "question": rec["question"], "answer": rec["answer"], "pred": pred}
            if not fmt or truncated:
                done.append(Outcome.ok(it["id"], {**base, "reason": "truncated" if truncated else "bad_format",
                                                  "response": response}, to=rejected))
            elif not ok:
                done.append(Outcome.ok(it["id"], {**base, "reason": "wrong_answer", "response": response}, to=rejected))
            else:
                it["response"], it["base"] = response, base
                verified.append(it)
        if judge_b is not None and verified:
            verified = _consistent(judge_b, verified, rejected, retry, done)
        for it in verified:
            rec, base, response = it["rec"], it["base"], it["response"]
            img_ref = record_image(rec)
            if isinstance(img_ref, str):  # absolute, so sft.jsonl works from wherever it is read
                img_ref = str((Path(root) / img_ref).resolve() if root and not Path(img_ref).is_absolute() else Path(img_ref))
            else:
                img_ref = _save_image(it["img"], out / "images", it["id"])
            done.append(Outcome.ok(it["id"], {
                **base,
                "image": img_ref,
                **({"choices": rec["choices"]} if rec.get("choices") else {}),
                "response": ground_wording(response),
                "description": it["description"],
                "pseudo_cot": it["pseudo_cot"],
            }))
        return done

    try:
        # kept -> sft.jsonl, decided rejections -> rejected.jsonl (both skipped on resume), bad records -> quarantine
        run_stage(records(), key=lambda r: r[0], process=process, store=kept, done=[rejected], quarantine=quarantine,
                  batch_size=batch_size, desc="cold start", progress_by="request")
        stats = _stats(out, kept, rejected, quarantine, retry)
    finally:
        for s in (kept, rejected, quarantine):
            s.close()
        for b in backends:
            b.close()
    if retry:
        logger.warning("cold start: %d call(s) failed (%s); those samples are undecided — rerun the same command "
                       "to retry them", sum(retry.values()), dict(retry))
    return stats


def _consistent(judge, items: list[dict], rejected: JsonlStore, retry: Counter, done: list[Outcome]) -> list[dict]:
    """Keep the items whose chain the judge finds logically consistent; judge failures are transient."""
    from vlrl.judge import chat_structured

    def parse(obj, i):
        if not isinstance(obj, dict) or not isinstance(obj.get("consistent"), bool):
            raise ValueError('answer with JSON {"consistent": true|false, "reason": "..."}')
        return obj

    reqs = [ChatRequest([{"role": "user", "content": render("cold_start_consistency", question=it["rec"]["question"],
                                                            response=it["response"])}],
                        SamplingParams(max_tokens=256, temperature=0.0), id=it["id"]) for it in items]
    keep = []
    for it, verdict in zip(items, chat_structured(judge, reqs, parse), strict=True):
        if not verdict.ok:
            done.append(_transient(retry, it["id"], "judge_error", verdict.error))
        elif not verdict.value["consistent"]:
            done.append(Outcome.ok(it["id"], {**it["base"], "reason": "inconsistent", "response": it["response"],
                                              "judge_reason": str(verdict.value.get("reason", ""))[:500]}, to=rejected))
        else:
            keep.append(it)
    return keep


def _save_image(img, folder: Path, rid: str) -> str:
    import re

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (re.sub(r"[^A-Za-z0-9._-]", "_", rid) + ".png")
    if not path.exists():
        img.save(path)
    return str(path.resolve())


def _stats(out: Path, kept: JsonlStore, rejected: JsonlStore, quarantine: Quarantine, retry: Counter) -> dict[str, Any]:
    reasons = Counter(r.get("reason", "?") for r in rejected)
    total = len(kept) + len(rejected) + len(quarantine) + sum(retry.values())
    stats = {
        "total": total,
        "kept": len(kept),
        "rejected": len(rejected),
        "quarantined": len(quarantine),
        "reject_reasons": dict(reasons),
        "keep_rate": len(kept) / total if total else 0.0,
        "retry": sum(retry.values()),
        "retry_reasons": dict(retry),
        "failed_this_run": sum(retry.values()),
    }
    atomic_write_json(out / "stats.json", stats)
    return stats
