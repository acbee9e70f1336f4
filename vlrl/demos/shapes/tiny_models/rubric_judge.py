"""The RubiCap demo's rubric judge: a tiny LM that grades one rubric criterion against one caption.

RubiCap's reward asks a light judge, per rubric, whether a rollout caption meets it
(``rubicap_rubric`` with ``per_rubric: true``). In the shapes world that judge is a tiny Qwen2 LM
(:func:`vlrl.core.tiny.make_tiny`) trained here, with its own tokenizer (trained on the rendered
judge requests and the world's text; the CapRL demo's tokenizer is left alone), to answer the
*real* per-rubric request with one word, ``PASS`` or ``FAIL``, then end its turn. The reward reads
that through :func:`vlrl.methods.rubicap.verdicts.parse_single_verdict` (an answer that starts with
PASS/FAIL), greedy, through the ``hf:`` backend.

What it is trained on, and why that is honest:

* **Criteria** are the ones the real pipeline writes: for synthetic scenes, rule-based teachers
  (:mod:`vlrl.demos.shapes.standins.committee`) caption the scene's items, a synthetic terse student caption
  is diagnosed by the writer, and the writer's answer goes through the real schema
  (:func:`vlrl.methods.rubicap.schema.validate_writer_output`), so deficiency criteria and the
  schema's regression pitfalls appear with the wording the demo will use.
* **Captions** are varied rewrites of each scene: full, attribute-dropped, mis-stated, with an
  invented shape, garbled (:func:`vlrl.demos.shapes.kit.noise.garble`), and the student's own.
  None comes from the policy being trained, and no label comes from the evaluation judge.
* **Labels** come from a world oracle (:func:`oracle_verdict`): the criterion text is read back
  into the world fact it names, and the caption is read by a strict reader of the world's grammar
  (:func:`vlrl.demos.shapes.kit.world.parse_caption`). A caption that does not parse states nothing,
  so a garbled or keyword-stuffed caption meets no criterion.
* **Prompts** are rendered by the reward's own code
  (:meth:`vlrl.methods.rubicap.reward.RubricJudgeReward.request_text`) and the ``hf:`` backend's
  :meth:`~vlrl.core.backends.hf.HFBackend.render_prompt` and
  :meth:`~vlrl.core.backends.hf.HFBackend.choice_token`, so training and use cannot disagree.

Its verdict accuracy against the oracle on criteria of scenes it never saw is written to the
cached ``warmstart.json`` (``heldout_acc``) and reported by the demo beside the QA accuracy.
Cached under the demo cache by a hash of :class:`JudgeConfig` plus the seed, like the other warm starts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import random
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.cache import cached
from vlrl.demos.shapes.kit.noise import corrupt, garble
from vlrl.demos.shapes.standins.committee import COMMITTEE, facts_of, teacher_items, write_rubrics

logger = logging.getLogger(__name__)

VERSION = 2
PASS, FAIL = "PASS", "FAIL"
# one line per message, like the demo's answerer: short sequences on CPU
CHAT_TEMPLATE = "{%- for message in messages %}{{ message['content'] }}{{ '\n' }}{%- endfor %}"
# what a caption can state for a criterion's fact (the auxiliary target; index len(VALUES): nothing)
VALUES = (*W.COLOURS, *W.SHAPES, *W.SIZES, *W.NUMBERS)


@dataclass(frozen=True)
class JudgeConfig:
    world: W.WorldConfig = field(default_factory=W.WorldConfig)
    vocab_size: int = 640
    hidden: int = 128
    layers: int = 2
    init: float = 0.06
    steps: int = 400
    batch: int = 32
    lr: float = 3e-3
    aux_weight: float = 1.0
    pool: int = 16000
    held: int = 1200

    def key(self) -> str:
        """Settings plus what the judge learns to read: a request rendered by the reward's own code
        for the committee's rubrics of a fixed scene, and the chat template. A changed judge
        template, writer, schema or committee is a new judge, never a stale cached one."""
        blob = json.dumps([VERSION, asdict(self), CHAT_TEMPLATE, request_fingerprint(self.world)], sort_keys=True,
                          default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


# -- the world oracle --------------------------------------------------------------------------

_PLACE = {v: k for k, v in W.WHERE.items()}
_P = "|".join(re.escape(p) for p in _PLACE)
_NUM = "|".join(W.NUMBERS)
_PATTERNS = [
    (re.compile(rf"^The caption describes exactly ({_NUM}) shapes?\.$"), lambda m: (("scene", "count"), m[1])),
    (re.compile(rf"^The caption says the shape ({_P}) is an? (\w+)\.$"), lambda m: ((_PLACE[m[1]], "shape"), m[2])),
    (re.compile(rf"^The caption says the shape ({_P}) is (\w+)\.$"),
     lambda m: ((_PLACE[m[1]], "size" if m[2] in W.SIZES else "colour"), m[2])),
]
_REGRESSION = re.compile(r"^States something that contradicts this fact about the image: (.*)$")
_FACTS = [
    (re.compile(rf"^The image holds ({_NUM}) shapes?\.$"), lambda m: (("scene", "count"), m[1])),
    (re.compile(rf"^The (shape|colour|size) of the shape ({_P}) is (\w+)\.$"), lambda m: ((_PLACE[m[2]], m[1]), m[3])),
]


def criterion_fact(criterion: str) -> tuple[str, tuple[str, str], str]:
    """``(mode, key, value)`` of a criterion the demo's writer (or the schema) wrote.

    ``mode`` is ``"states"`` (the caption must state the fact) or ``"contradicts"`` (a regression
    pitfall: met when the caption states another value). Raises ``ValueError`` for other text.
    """
    text = criterion.strip()
    m = _REGRESSION.match(text)
    if m:
        for pat, fn in _FACTS:
            f = pat.match(m[1].strip())
            if f:
                return ("contradicts", *fn(f))
    for pat, fn in _PATTERNS:
        f = pat.match(text)
        if f:
            key, value = fn(f)
            if key[1] != "count" and value not in (*W.SHAPES, *W.COLOURS, *W.SIZES):
                break
            return ("states", key, value)
    raise ValueError(f"not a shapes-world criterion: {criterion!r}")


def stated_value(criterion: str, caption: str) -> str | None:
    """What ``caption`` states (strictly read) for the fact ``criterion`` is about, or None."""
    _, key, _ = criterion_fact(criterion)
    return facts_of(W.parse_caption(caption or "")).get(key)


def oracle_verdict(criterion: str, caption: str) -> bool:
    """Whether ``caption`` meets ``criterion``, read by a strict reader of the world's grammar."""
    mode, _, value = criterion_fact(criterion)
    got = stated_value(criterion, caption)
    if mode == "states":
        return got == value
    return got is not None and got != value


# -- training examples -------------------------------------------------------------------------


def _with_invented(items: list[W.Item], rng: random.Random) -> list[W.Item]:
    return teacher_items(items, "invent", 1.0, rng)


def caption_variant(scene: W.Scene, rng: random.Random) -> str:
    """One rewrite of the scene's caption: full, dropped, mis-stated, invented or garbled."""
    r = rng.random()
    items = W.stated_items(scene, rng, 0.0 if r < 0.15 else rng.uniform(0.0, 0.8))
    if 0.35 <= r < 0.6:
        items = corrupt(items, rng)
        if rng.random() < 0.3:
            items = corrupt(items, rng)
    elif 0.6 <= r < 0.75:
        items = _with_invented(items, rng)
    cap = W.caption_from_items(items)
    if 0.75 <= r < 0.9:
        cap = garble(cap, rng)
    return cap


def scene_rubrics(scene: W.Scene, rng: random.Random) -> tuple[str, list[dict[str, Any]]]:
    """A terse student caption of ``scene`` and the rubrics the real writer + schema give it."""
    from vlrl.methods.rubicap.schema import validate_writer_output

    teachers = {f"T{i}": W.caption_from_items(teacher_items(scene.items, p, r * rng.uniform(0.5, 1.5), rng))
                for i, (_, p, r) in enumerate(COMMITTEE, 1)}
    stated = W.stated_items(scene, rng, rng.uniform(0.2, 0.9))
    if rng.random() < 0.2:
        stated = corrupt(stated, rng)
    student = W.caption_from_items(stated)
    out = validate_writer_output(write_rubrics(teachers, student), {k: k for k in teachers}, student=student)
    return student, out["rubrics"]


def judge_examples(n: int, seed: int, prefix: str, world: W.WorldConfig, request,
                   split: str | None = "train") -> list[dict[str, Any]]:
    """``n`` (rendered request, verdict) pairs; ``request(caption, rubric_dict) -> text``; scenes of
    the world's ``split`` layouts (:func:`vlrl.demos.shapes.kit.world.layout_split`)."""
    rng = random.Random(f"rubric-judge/{prefix}/{seed}")
    out: list[dict[str, Any]] = []
    for sc in W.make_scenes(n, seed, world, prefix=prefix, split=split):
        student, rubrics = scene_rubrics(sc, rng)
        for rub in rubrics:
            caps = [caption_variant(sc, rng) for _ in range(2)]
            if rng.random() < 0.25:
                caps.append(student)
            for cap in caps:
                label = oracle_verdict(rub["criterion"], cap)
                # regression pitfalls are rarely met by a random rewrite: thin their negatives so
                # both verdicts stay common for every kind of criterion
                if not label and rng.random() < (0.6 if rub["kind"] == "regression" else 0.2):
                    continue
                got = stated_value(rub["criterion"], cap)
                out.append({"text": request(cap, rub), "label": label, "kind": rub["kind"],
                            "value": VALUES.index(got) if got in VALUES else len(VALUES)})
                if len(out) >= n:
                    return out
    return out


@functools.cache
def request_fingerprint(world: W.WorldConfig) -> str:
    scene = W.make_scenes(1, 0, world, prefix="judge-key")[0]
    student, rubrics = scene_rubrics(scene, random.Random(0))
    request = request_renderer()
    return hashlib.sha1("\n".join(request(student, r) for r in rubrics).encode()).hexdigest()


def reward_for_rendering():
    """The reward object whose :meth:`request_text` renders judge requests (the demo's settings)."""
    from vlrl.methods.rubicap.reward import RubricJudgeReward

    return RubricJudgeReward(judge="py:vlrl.demos.shapes.standins.committee:writer", per_rubric=True)


def request_renderer():
    """``(caption, rubric dict) -> user message`` exactly as the per-rubric reward renders it."""
    from vlrl.methods.rubicap.schema import parse_rubric_set

    reward = reward_for_rendering()

    def request(caption: str, rubric: dict[str, Any]) -> str:
        return reward.request_text(caption, parse_rubric_set([rubric])[0])

    return request


# -- building ----------------------------------------------------------------------------------


def judge_dir(seed: int, cache_dir: Path, cfg: JudgeConfig | None = None) -> Path:
    """Where the judge of ``seed`` is cached (it exists when it holds ``warmstart.json``)."""
    return Path(cache_dir) / f"rubric-judge-{(cfg or JudgeConfig()).key()}-s{seed}"


def build_rubric_judge(seed: int, cache_dir: Path, cfg: JudgeConfig | None = None) -> Path:
    """The cached tiny rubric judge for ``seed`` (trained on first use, ~minutes on one core)."""
    cfg = cfg or JudgeConfig()
    cache_dir = Path(cache_dir)
    tok = cached(cache_dir / f"judge-tokenizer-{cfg.key()}", lambda out: _train_tokenizer(cfg, out))
    return cached(judge_dir(seed, cache_dir, cfg), lambda out: train_rubric_judge(cfg, tok, out, seed))


def _train_tokenizer(cfg: JudgeConfig, out: Path) -> dict[str, Any]:
    from vlrl.core.tiny import train_tokenizer

    request = request_renderer()
    texts = [e["text"] for e in judge_examples(1500, 0, "jtok", cfg.world, request)]
    texts += W.world_texts(cfg.world)
    # the verdicts as frequent as the requests, so BPE merges each into one token however long the prompt grows
    texts += [PASS, FAIL, "\n" + PASS, "\n" + FAIL] * len(texts)
    tok = train_tokenizer(texts, out, vocab_size=cfg.vocab_size)
    for w in (PASS, FAIL):
        if len(tok(w, add_special_tokens=False)["input_ids"]) != 1:
            raise RuntimeError(f"judge tokenizer splits {w!r}; raise vocab_size")
    return {"kind": "judge-tokenizer", "vocab": len(tok)}


def train_rubric_judge(cfg: JudgeConfig, tok_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    import torch

    from vlrl.demos.shapes.tiny_models.answerer import fast_render
    from vlrl.demos.shapes.tiny_models.train_loop import fresh_tiny_lm, train_steps

    torch.set_num_threads(1)
    model, tok, backend = fresh_tiny_lm(tok_dir, out, seed, chat_template=CHAT_TEMPLATE, hidden=cfg.hidden,
                                        layers=cfg.layers, init=cfg.init, name="rubric-judge-in-training")
    chat = fast_render(lambda user: backend.render_prompt([{"role": "user", "content": user}]))
    request = request_renderer()
    t0 = time.time()
    train = judge_examples(cfg.pool, seed, "rj-train", cfg.world, lambda c, r: chat(request(c, r)))
    # held-out criteria: scenes (and so criteria and captions) of the held-out layouts
    held = judge_examples(cfg.held, seed, "rj-held", cfg.world, lambda c, r: chat(request(c, r)), split="eval")
    probe = train[0]["text"]
    verdict_tok = {True: backend.choice_token(probe, PASS), False: backend.choice_token(probe, FAIL)}
    eos = tok.eos_token_id
    for t in verdict_tok.values():  # the answer must be the one token the model writes, then its end
        if tok(probe + tok.decode([t]), add_special_tokens=False)["input_ids"][-1] != t:
            raise RuntimeError("judge tokenizer does not write PASS/FAIL as one token after the prompt")
    logger.info("rubric judge-s%d: %d training / %d held-out requests (%.0f%% pass), built in %.0fs", seed, len(train),
                len(held), 100 * sum(e["label"] for e in train) / len(train), time.time() - t0)
    enc = tok([e["text"] for e in train + held], add_special_tokens=False)["input_ids"]
    ids_all = [torch.tensor(x) for x in enc]
    labels_all = torch.tensor([verdict_tok[e["label"]] for e in train + held])
    # Auxiliary target at the verdict position (training only, as for the CapRL answerer): the
    # value the caption states for the criterion's fact. Naming it is what the verdict rests on,
    # and it gives the tiny model a far richer signal than one bit per request.
    values_all = torch.tensor([e["value"] for e in train + held])
    aux = torch.nn.Linear(cfg.hidden, len(VALUES) + 1)
    pad = tok.pad_token_id

    def batch(idx: list[int]):
        # right padding: positions start at 0 as under generate() (which derives them from the mask)
        L = max(len(ids_all[i]) for i in idx) + 1
        ids = torch.full((len(idx), L), pad, dtype=torch.long)
        attn = torch.zeros((len(idx), L), dtype=torch.long)
        last = torch.zeros(len(idx), dtype=torch.long)
        for b, i in enumerate(idx):
            n = len(ids_all[i])
            ids[b, :n] = ids_all[i]
            ids[b, n] = labels_all[i]
            attn[b, : n + 1] = 1
            last[b] = n - 1
        return ids, attn, last

    def step_loss(idx: list[int]):
        ids, attn, last = batch(idx)
        h = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
        rows = torch.arange(len(idx))
        # logits only where there is a label: the verdict word, then the end of the turn
        answer, stop = model.lm_head(h[rows, last]), model.lm_head(h[rows, last + 1])
        verdict = torch.nn.functional.cross_entropy(answer, labels_all[idx])
        end = torch.nn.functional.cross_entropy(stop, torch.full((len(idx),), eos))
        named = torch.nn.functional.cross_entropy(aux(h[rows, last]), values_all[idx])
        return verdict + 0.25 * end + cfg.aux_weight * named, answer

    def evaluate(n: int | None = None) -> float:
        model.eval()
        n0, correct, n = len(train), 0, n or len(held)
        ids_pass, ids_fail = verdict_tok[True], verdict_tok[False]
        with torch.no_grad():
            for s in range(0, n, 200):
                idx = list(range(n0 + s, n0 + min(s + 200, n)))
                _, lg = step_loss(idx)
                pred = lg[:, ids_pass] > lg[:, ids_fail]
                correct += int((pred == (labels_all[idx] == ids_pass)).sum())
        model.train()
        return correct / n

    rng = random.Random(f"rubric-judge-batches/{seed}")
    model.train()
    losses = train_steps([*model.parameters(), *aux.parameters()],
                         lambda step: step_loss([rng.randrange(len(train)) for _ in range(cfg.batch)])[0],
                         steps=cfg.steps, lr=cfg.lr, name=f"rubric judge-s{seed}",
                         report=lambda: f"held-out verdict acc {evaluate(400):.3f}")
    acc = evaluate()
    model.eval()
    model.generation_config.do_sample = False
    model.generation_config.eos_token_id = eos
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return {"kind": "rubric-judge", "seed": seed, "heldout_acc": round(acc, 4), "final_loss": sum(losses[-50:]) / 50,
            "train_requests": len(train), "heldout_requests": len(held),
            "train_pass_rate": round(sum(e["label"] for e in train) / len(train), 4),
            "config": asdict(replace(cfg))}
