"""``vlrl bench paths``: every batched model path, batched against one request at a time, in one run.

``vlrl bench caption`` guards one path; a pipeline can lose its batching without it (a loop that
calls the backend once per request, or a backend that generates each request of a batch alone) and
nothing would fail. So every other pipeline that sends work to a model in batches runs here twice on
the same tiny models: once as it ships, and once through a backend that passes each request on alone.
The pipeline's code is the same in both runs; only what reaches the model differs.

Each side is timed by the seconds spent inside the model calls (model loading, file IO and parsing
are the pipeline's own and the same in both runs). A probe wraps each backend and also records how
many requests the pipeline handed over per call: a path that hands one request at a time shows a
ratio near 1 here and ``requests_per_call`` of 1.

The paths: ``qa-curate`` (the question-writing VLM and the text answerer of the filter), teacher
captions, Prism captioning (and its answerer), caption-QA (its captioner and answerer), and the
``caprl_qa`` reward's exact mode. Each run gets its own output folder, hence its own empty response
cache: nothing is replayed.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vlrl.core.backends import Backend, ChatRequest, ChoiceRequest, SamplingParams, load_backend

logger = logging.getLogger(__name__)


class Probe(Backend):
    """A backend in front of another: times the calls, and in ``single`` mode sends requests one by one."""

    observed = False  # the inner backend reports what went to the model

    def __init__(self, inner: Backend, single: bool) -> None:
        super().__init__(inner.model)
        self.inner, self.single, self.kind = inner, single, inner.kind
        self.stats = inner.stats
        self.seconds = 0.0
        self.calls = self.requests = 0

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def choice_method(self) -> str:
        return self.inner.choice_method()

    def __getattr__(self, name: str) -> Any:  # is_vlm, render_prompt, ... of the inner backend
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _timed(self, fn: Callable[[list[Any]], list[Any]], requests: list[Any]) -> list[Any]:
        self.calls += 1
        self.requests += len(requests)
        t0 = time.perf_counter()
        try:
            if self.single:
                return [fn([r])[0] for r in requests]
            return fn(requests)
        finally:
            self.seconds += time.perf_counter() - t0

    def _chat(self, requests: list[ChatRequest]) -> list[Any]:
        return self._timed(self.inner.chat, requests)

    def _score_choices(self, requests: list[ChoiceRequest]) -> list[Any]:
        return self._timed(self.inner.score_choices, requests)

    def close(self) -> None:  # the inner backends serve both runs; bench_paths closes them
        pass

    def report(self) -> dict[str, Any]:
        return {"model_seconds": round(self.seconds, 4), "calls": self.calls,
                "requests_per_call": round(self.requests / self.calls, 2) if self.calls else None}


QUESTIONS = ("Question 1: What colour is the square?\nA. red\nB. blue\nC. green\nD. grey\nAnswer: A\n\n"
             "Question 2: How many shapes are there?\nA. one\nB. two\nC. three\nD. four\nAnswer: B\n")


class Canned(Backend):
    """Writes the same text for every request. A random tiny VLM writes empty captions and no MCQ that
    parses, and the answering halves of ``qa-curate`` and Prism only run on text they can read."""

    kind = "bench-canned"

    def __init__(self, text: str) -> None:
        super().__init__("bench-canned")
        self.text = text

    def _chat(self, requests: list[ChatRequest]) -> list[Any]:
        from vlrl.core.backends import ChatResult

        return [ChatResult(texts=[self.text] * r.sampling.n, finish_reasons=["stop"] * r.sampling.n) for r in requests]

    def _score_choices(self, requests: list[ChoiceRequest]) -> list[Any]:
        from vlrl.core.backends import ChoiceResult

        # It only writes: a path that asks it for choice scores gets a one-line failure per request.
        return [ChoiceResult(error=f"{r.id or 'request'}: bench-canned writes text; it scores no choices")
                for r in requests]


def _images(folder: Path, n: int, side: int = 56, seed: int = 0) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(folder / f"im{i:03d}.png")
    return folder


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    from vlrl.core.pipeline import write_jsonl

    write_jsonl(path, rows)
    return path


def _qa_rows(n: int) -> list[dict[str, Any]]:
    from vlrl.bench.reward import synthetic_captions

    _, questions = synthetic_captions(n)
    return [{"id": f"im{i:03d}", "image": f"im{i:03d}.png", "questions": qs} for i, qs in enumerate(questions)]


def _paths(n: int, tmp: Path) -> dict[str, Callable[[Backend, Backend, Path], dict[str, Probe]]]:
    """name -> run(vlm, lm, out): runs the pipeline on those backends, returns its probes by role."""
    from vlrl.bench.reward import synthetic_captions

    images = _images(tmp / "images", n)
    qa = _write_jsonl(images / "qa.jsonl", _qa_rows(n))
    prism = _write_jsonl(images / "prism.jsonl", [
        {"id": f"q{i}", "benchmark": "colors", "image": f"im{i:03d}.png", "question": f"Which colour dominates in picture {i}?",
         "options": ["red", "green", "blue", "grey"], "answer": "ABCD"[i % 4]} for i in range(n)])
    captions, questions = synthetic_captions(2 * n)

    def qa_curate(vlm, lm, out):
        from vlrl.methods.caprl.curate import CurateConfig, curate

        cfg = CurateConfig(per_image=2, rounds=2, max_tokens=48, max_attempts=1)
        writer = Canned(QUESTIONS)
        curate(images, vlm, lm, out / "write", cfg, progress=False)  # the VLM writes (nothing parses)
        vlm2 = Probe(vlm.inner, vlm.single)
        curate(images, writer, lm, out / "filter", cfg, progress=False, filter_vlm=vlm2)
        return {"vlm (write)": vlm, "vlm (filter)": vlm2, "answerer": lm}

    def teacher_captions(vlm, lm, out):
        from vlrl.methods.rubicap.teachers import run_teacher_committee

        run_teacher_committee(images, [vlm], out, batch_size=16, max_tokens=16)
        return {"teacher": vlm}

    def prism_eval(vlm, lm, out):
        from vlrl.methods.caprl.prism import evaluate_prism

        evaluate_prism(vlm, Probe(lm.inner, lm.single), prism, out / "caption", caption_max_tokens=16, progress=False)
        # the answerer reads captions; the tiny VLM's are empty, so a canned captioner writes them here
        evaluate_prism(Canned("A red square and a blue circle on a grey background."), lm, prism, out / "answer",
                       caption_max_tokens=16, progress=False)
        return {"captioner": vlm, "answerer": lm}

    def caption_qa(vlm, lm, out):
        from vlrl.methods.rubicap.caption_qa import run_caption_qa

        # the tiny VLM's captions come out empty: a caption file gives the answerer something to read
        file = _write_jsonl(out.parent / f"{out.name}-captions.jsonl",
                            [{"image_id": f"im{i:03d}", "caption": c} for i, c in enumerate(captions[:n])])
        run_caption_qa(qa, lm, out, captions=[file], captioners=[vlm], budgets=[50], caption_max_tokens=16,
                       reward_settings={"rounds": 2, "questions_per_caption": 2})
        return {"captioner": vlm, "answerer": lm}

    def reward_exact(vlm, lm, out):
        from vlrl.methods.caprl.reward import CapRLQAReward

        CapRLQAReward(lm, mode="exact", questions_per_caption=4, rounds=2, min_letter_mass=0.0).score(captions, questions=questions)
        return {"answerer": lm}

    return {"qa-curate": qa_curate, "teacher-captions": teacher_captions, "prism": prism_eval,
            "caption-qa": caption_qa, "reward-exact": reward_exact}


def _warm(vlm: Backend, lm: Backend) -> None:
    """First calls allocate and pick kernels: paid here, outside both timings."""
    from PIL import Image

    img = Image.new("RGB", (56, 56), "red")
    vlm.chat([ChatRequest([{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": "Hi"}]}],
                          SamplingParams(max_tokens=4))] * 2)
    lm.chat([ChatRequest([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=4))] * 2)
    lm.score_choices([ChoiceRequest([{"role": "user", "content": "A or B?"}], ["A", "B"])] * 2)


def bench_paths(vlm: str | None = None, answerer: str | None = None, *, images: int = 8,
                only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every path batched and one request at a time; returns per path and role the model seconds
    of both sides, the ratio (single / batched) and the requests per call the pipeline made."""
    if images < 2:
        raise ValueError(f"images must be >= 2, got {images}")
    with tempfile.TemporaryDirectory(prefix="vlrl-bench-paths-") as d:
        tmp = Path(d)
        if vlm is None or answerer is None:
            from vlrl.core.tiny import make_tiny

            vlm = vlm or f"hf:{make_tiny('qwen2_5_vl', tmp / 'tiny_vlm', seed=0)}"
            answerer = answerer or f"hf:{make_tiny('qwen2', tmp / 'tiny_lm', seed=0)}"
        paths = _paths(images, tmp)
        unknown = sorted(set(only or ()) - set(paths))
        if unknown:
            raise ValueError(f"unknown path(s) {unknown}; known: {sorted(paths)}")
        vlm_b, lm_b = load_backend(vlm), load_backend(answerer)
        out: dict[str, Any] = {}
        try:
            _warm(vlm_b, lm_b)
            for name, run in paths.items():
                if only and name not in only:
                    continue
                sides = {}
                for side in ("batched", "single"):
                    probes = run(Probe(vlm_b, side == "single"), Probe(lm_b, side == "single"), tmp / f"{name}-{side}")
                    sides[side] = {role: p.report() for role, p in probes.items()}
                out[name] = {role: {"batched": sides["batched"][role], "single": sides["single"][role],
                                    "speedup": _ratio(sides["single"][role]["model_seconds"], sides["batched"][role]["model_seconds"])}
                             for role in sides["batched"]}
                logger.info("%s: %s", name, json.dumps({r: v["speedup"] for r, v in out[name].items()}))
        finally:
            vlm_b.close()
            lm_b.close()
    return {"paths": out, "settings": {"images": images, "vlm": "tiny qwen2.5-vl" if "tiny_vlm" in vlm else vlm,
                                       "answerer": "tiny qwen2" if "tiny_lm" in answerer else answerer}}


def _ratio(single: float, batched: float) -> float | None:
    return round(single / batched, 2) if batched > 0 else None
