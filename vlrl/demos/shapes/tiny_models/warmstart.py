"""Warm starts for the shapes demo: a captioner that *can* say everything, and answerers that read.

RL can only sharpen what a policy already does now and then, so the demo starts from a tiny
Qwen2.5-VL captioner fine-tuned on deliberately incomplete captions: full captions first (so every
attribute word gets bound to the pixels), then captions with each attribute dropped with p=``drop_p``. It
ends up stating about a third of the facts when sampled, nearly all of them right — the room GRPO
has to improve. Two details decide whether this works:

* The captioner is trained by the project's SFT (:func:`vlrl.training.sft.run_sft`, what ``vlrl
  train sft`` runs: TRL's ``SFTTrainer``) with the very prompt the demo's GRPO recipe asks for
  captions with (the recipe prompt :data:`~vlrl.demos.shapes.world.CAPTION_PROMPT`, no system
  prompt), so both trainers template it the same way: ``prepare_multimodal_messages`` then the
  processor's chat template (default system line, image before text), with the ``mm_token_type_ids``
  Qwen2.5-VL needs for M-RoPE. :func:`caption_prompt_encoding` is that prompt, for tests and
  ``prompt_tokens``. The curriculum is data, not code: :func:`captioner_sft_rows` writes one row
  per (step, slot) in training order and :func:`captioner_recipe` reads them sequentially, one
  pass, so step ``s`` trains on exactly the captions the schedule gives it.
* The answerer (a tiny Qwen2 LM) is trained on the very requests the ``caprl_qa`` reward sends:
  the reward's own option presentation (:func:`vlrl.methods.caprl.mcq.present`), its prompt template, the
  pre-fill, and the ``hf:`` backend's public :meth:`~vlrl.core.backends.hf.HFBackend.render_prompt` and
  :meth:`~vlrl.core.backends.hf.HFBackend.choice_token`, so training and use cannot disagree. Labels follow what the
  caption *states* (:func:`vlrl.demos.shapes.world.answer_from_caption`), so an omitted fact means
  "cannot answer" and a mis-stated one means the mis-stated answer. An auxiliary head predicting
  the stated value word at the answer position (training only) is what makes the letter/value
  binding learnable at this size.

Why the answerer's loop is hand-written rather than a ``vlrl train sft`` recipe: it is trained on
one answer token per request plus an auxiliary head, which no SFT recipe expresses. It takes the
demo's shared step (:func:`vlrl.demos.shapes.train_loop.train_steps`), whose schedule the
captioner's recipe repeats (AdamW without weight decay, 30 warm-up steps then cosine to zero,
gradients clipped to norm 1).

Every artefact is cached under ``cache_dir`` by a hash of its settings plus its seed, written to a
temporary folder and renamed into place, so an interrupted warm start never leaves a half model.
Jobs run in separate processes with one thread each (:func:`build_all`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from vlrl.demos.shapes import world as W
from vlrl.demos.shapes.recipes import run_recipe, save_recipe
from vlrl.demos.shapes.train_loop import WARMUP_STEPS, train_steps

logger = logging.getLogger(__name__)

VERSION = 1
CAPTIONER_VERSION = 2
"""Part of the captioner's key only (tokenizer and answerers stay cached): 2 is the captioner trained
by the project's SFT recipe; 1 was the hand-written loop's, never reused for the new training."""
ANSWER_PROMPT = "shapes_answer"
# The tiny answerer's own chat template: the rendered prompt, one line per message. A compact
# format keeps the answerer's sequences short on CPU; the backend applies it like any template.
ANSWERER_CHAT_TEMPLATE = "{%- for message in messages %}{{ message['content'] }}{{ '\n' }}{%- endfor %}"


@dataclass(frozen=True)
class WarmStartConfig:
    world: W.WorldConfig = field(default_factory=W.WorldConfig)
    vocab_size: int = 512
    # captioner (tiny Qwen2.5-VL)
    cap_hidden: int = 128
    cap_layers: int = 2
    cap_mrope: tuple[int, int, int] = (4, 6, 6)
    vision_hidden: int = 128
    vision_depth: int = 2
    cap_init: float = 0.05
    sft_images: int = 6000
    sft_steps: int = 1000
    sft_batch: int = 64
    sft_lr: float = 3e-3
    full_caption_steps: int = 400
    drop_p: float = 0.65
    """Attribute drop rate after the curriculum. Above 0.5 so that *greedy* decoding usually omits
    an attribute (at 0.5 greedy is a coin flip per attribute and can state most facts already)."""
    # answerer (tiny Qwen2)
    ans_hidden: int = 128
    ans_layers: int = 4
    ans_init: float = 0.06
    ans_steps: int = 400
    ans_batch: int = 128
    ans_lr: float = 3e-3
    ans_pool: int = 24000
    ans_drop_max: float = 0.6
    ans_corrupt_p: float = 0.2
    """Share of training captions with one attribute mis-stated (teaches reading, not guessing)."""
    ans_garble_p: float = 0.15
    """Share of training captions garbled (a span repeated or dropped, words swapped, truncated,
    items chained with "on"). Every caption is labelled by what a strict reader of the world's
    grammar gets from it (:func:`vlrl.demos.shapes.world.parse_caption`), so a garbled caption answers
    nothing: keyword-stuffed run-ons cannot hack the reward."""
    ans_empty_p: float = 0.0
    """Share of empty captions labelled "cannot answer". 0 by default: what the answerer then says
    with no caption is its prior, which is exactly what the text-only QA filter should probe."""
    aux_weight: float = 1.0
    answer_prompt: str = ANSWER_PROMPT

    def key(self, part: str) -> str:
        d = asdict(self)
        keep = {k: v for k, v in d.items() if k == "world" or k == "vocab_size" or k.startswith(part)}
        if part == "ans":
            keep["prompt"] = self.answer_prompt
            if self.aux_weight != 1.0:
                keep["aux_weight"] = self.aux_weight
        elif part == "cap":
            keep.update({k: d[k] for k in ("vision_hidden", "vision_depth", "sft_images", "sft_steps", "sft_batch",
                                           "sft_lr", "full_caption_steps", "drop_p")})
            keep["captioner_version"] = CAPTIONER_VERSION
        blob = json.dumps([VERSION, part, keep], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


def default_cache_dir() -> Path:
    return Path(os.environ.get("VLRL_CACHE", Path.home() / ".cache" / "vlrl")) / "demo"


# -- cached building ---------------------------------------------------------------------------


def _cached(final: Path, build: Callable[[Path], dict[str, Any]]) -> Path:
    """Build into a temp folder next to ``final`` and rename it into place (atomic, race-safe).

    One builder per artefact: two demos started together (or a demo and a test) that need the same
    warm start take a lock on it, and the second waits for the first and reuses its model instead
    of training the same thing again on the same few cores.
    """
    if (final / "warmstart.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        return _build_once(final, build)


def _build_once(final: Path, build: Callable[[Path], dict[str, Any]]) -> Path:
    if (final / "warmstart.json").exists():  # another process built it while this one waited
        return final
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        t0 = time.time()
        info = build(tmp)
        info["seconds"] = round(time.time() - t0, 1)
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
        if final.exists():  # an older incomplete folder (no warmstart.json): replace it
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def tokenizer_corpus(cfg: WarmStartConfig) -> list[str]:
    """Every string the demo's models will read: captions, questions, rendered answerer prompts."""
    from vlrl.core.prompts import render
    from vlrl.methods.caprl.ask import PREFILL
    from vlrl.methods.caprl.mcq import CANNOT_ANSWER, normalize_mcq, present

    texts = W.world_texts(cfg.world)
    rng = random.Random(0)
    for sc in W.make_scenes(300, 0, replace(cfg.world, max_shapes=3, word_prob=0.5), prefix="tokq"):
        cap = W.caption(sc, rng, rng.random() * 0.6)
        for q in W.questions(sc, rng):
            pres = present(normalize_mcq(q.to_dict()), rng, CANNOT_ANSWER)
            texts.append(render(cfg.answer_prompt, caption=cap, question=q.question, options=pres.lines()))
            texts.append(f"{PREFILL} {rng.choice(pres.letters)}")
    texts += ["You are a helpful assistant.", "system\n", "user\n", "assistant\n", PREFILL + " A", PREFILL + " B",
              PREFILL + " C", CANNOT_ANSWER]
    return texts * 3


def build_tokenizer(cfg: WarmStartConfig, cache_dir: Path) -> Path:
    def build(out: Path) -> dict[str, Any]:
        from vlrl.core.tiny import train_tokenizer

        tok = train_tokenizer(tokenizer_corpus(cfg), out, vocab_size=cfg.vocab_size)
        for w in [*W.COLOURS, *W.SHAPES, *W.SIZES, *W.WORDS, *W.NUMBERS, "yes", "no", "A", "B", "C"]:
            ids = tok(" " + w, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise RuntimeError(f"shapes tokenizer splits {' ' + w!r} into {len(ids)} tokens; raise vocab_size")
        return {"vocab": len(tok)}

    return _cached(cache_dir / f"tokenizer-{cfg.key('vocab')}", build)


def _job(kind: str, cfg: WarmStartConfig, tok_dir: str, out: str, seed: int) -> str:
    """Process entry point: one thread, build one cached model."""
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    fn = train_captioner if kind == "captioner" else train_answerer
    return str(_cached(Path(out), lambda tmp: fn(cfg, Path(tok_dir), tmp, seed)))


@dataclass
class WarmStart:
    tokenizer: Path
    captioner: Path
    answerer: Path
    judge: Path


def paths(cfg: WarmStartConfig, seed: int, judge_seed: int, cache_dir: Path) -> WarmStart:
    tok = cache_dir / f"tokenizer-{cfg.key('vocab')}"
    return WarmStart(
        tok,
        cache_dir / f"captioner-{cfg.key('cap')}-s{seed}",
        cache_dir / f"answerer-{cfg.key('ans')}-s{seed}",
        cache_dir / f"answerer-{cfg.key('ans')}-s{judge_seed}",
    )


def build_all(cfg: WarmStartConfig, seed: int, judge_seed: int, cache_dir: Path | None = None, workers: int = 2) -> WarmStart:
    """Tokenizer, captioner, reward answerer and judge answerer; cached, trained in parallel."""
    cache_dir = Path(cache_dir or default_cache_dir())
    ws = paths(cfg, seed, judge_seed, cache_dir)
    build_tokenizer(cfg, cache_dir)
    jobs = [("captioner", ws.captioner, seed), ("answerer", ws.answerer, seed), ("answerer", ws.judge, judge_seed)]
    todo = [j for j in jobs if not (j[1] / "warmstart.json").exists()]
    if todo:
        logger.info("warm start: training %s (cached under %s)", ", ".join(f"{k}-s{s}" for k, _, s in todo), cache_dir)
        if workers <= 1 or len(todo) == 1:
            for kind, out, s in todo:
                _job(kind, cfg, str(ws.tokenizer), str(out), s)
        else:
            with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=get_context("spawn")) as ex:
                futs = [ex.submit(_job, kind, cfg, str(ws.tokenizer), str(out), s) for kind, out, s in todo]
                for f in futs:
                    f.result()
    return ws


# -- captioner SFT -----------------------------------------------------------------------------


def caption_prompt_encoding(processor, image) -> dict[str, Any]:
    """The captioning prompt exactly as TRL's GRPOTrainer tokenizes it (system line, image first)."""
    from trl.data_utils import prepare_multimodal_messages

    msgs = prepare_multimodal_messages([{"role": "user", "content": W.CAPTION_PROMPT}], images=[image])
    return processor.apply_chat_template(
        conversation=[msgs], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )


def captioner_sft_rows(cfg: WarmStartConfig, seed: int, scenes: list[W.Scene]) -> list[dict[str, Any]]:
    """The captioner's curriculum as data: one row per (step, slot), in training order.

    Step ``s`` holds ``sft_batch`` distinct scenes; its captions are full for the first
    ``full_caption_steps`` steps and drop each attribute with p=``drop_p`` after. The draws (one
    seeded RNG: the step's scenes, then their captions) are those of the loop this replaced, so the
    recipe sees the same examples in the same order; it must read them sequentially.
    """
    rng = random.Random(f"sft/{seed}")
    rows = []
    for step in range(cfg.sft_steps):
        idx = rng.sample(range(len(scenes)), cfg.sft_batch)
        drop = 0.0 if step < cfg.full_caption_steps else cfg.drop_p
        for slot, i in enumerate(idx):
            rows.append({"id": f"{step:05d}-{slot:03d}", "image": f"images/{scenes[i].id}.png",
                         "caption": W.caption(scenes[i], rng, drop), "step": step, "drop_p": drop})
    return rows


def captioner_recipe(cfg: WarmStartConfig, seed: int, model: Path, data: Path, output_dir: Path) -> dict[str, Any]:
    """The captioner's ``vlrl train sft`` recipe: one pass over :func:`captioner_sft_rows`, in order.

    The user turn is the recipe prompt (the rows carry none), exactly as the demo's GRPO recipe
    asks for captions, so SFT and RL see one prompt. The schedule is the demo's other warm starts'
    (AdamW without weight decay, 30 warm-up steps then cosine to 0, gradients clipped to norm 1;
    transformers' warm-up starts at a rate of 0 where :func:`~vlrl.demos.shapes.train_loop.warmup_cosine`
    starts at 1/30 of it, a one-step offset). TRL's completion also trains the newline the chat
    template writes after ``<|im_end|>``, one easy token per caption the old loop did not train.
    ``logging_steps=50`` makes the last logged loss the mean of the last 50 steps (``final_loss``).
    """
    return {
        "method": "sft",
        "model": {"path": str(model), "dtype": "float32"},
        "data": {"source": str(data), "prompt": W.CAPTION_PROMPT, "response_column": "caption"},
        "trainer": {
            "output_dir": str(output_dir),
            "max_steps": cfg.sft_steps,
            "num_train_epochs": 1,
            "per_device_train_batch_size": cfg.sft_batch,
            "gradient_accumulation_steps": 1,
            "train_sampling_strategy": "sequential",  # the rows are the curriculum, in order
            "shuffle_dataset": False,
            "learning_rate": cfg.sft_lr,
            "lr_scheduler_type": "cosine",
            "warmup_steps": WARMUP_STEPS,
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "logging_steps": max(1, min(50, cfg.sft_steps)),
            "save_strategy": "no",
            "seed": seed,
            "dataloader_num_workers": 0,
            "gradient_checkpointing": False,
            "report_to": "none",
        },
    }


def write_captioner_sft(cfg: WarmStartConfig, seed: int, model: Path, root: Path) -> Path:
    """Render the ``sft_images`` scenes, write the curriculum and the recipe under ``root``; returns
    the recipe's path (``root/sft.yaml``, runnable as ``vlrl train sft``; it trains into ``root/sft``)."""
    data = root / "sft_data"
    (data / "images").mkdir(parents=True)
    scenes = W.make_scenes(cfg.sft_images, seed, cfg.world, prefix="sft")
    for sc in scenes:
        W.render(sc, cfg.world).save(data / "images" / f"{sc.id}.png")
    with open(data / "train.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in captioner_sft_rows(cfg, seed, scenes))
    return save_recipe(captioner_recipe(cfg, seed, model, data / "train.jsonl", root / "sft"), root / "sft.yaml")


def train_captioner(cfg: WarmStartConfig, tok_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    """Build the tiny captioner in ``out``: a fresh Qwen2.5-VL, then the project's SFT on the curriculum."""
    from transformers import AutoProcessor, GenerationConfig

    from vlrl.core.images import load_image
    from vlrl.core.tiny import make_tiny

    init = out / "init"
    make_tiny("qwen2_5_vl", init, seed=seed, tokenizer=str(tok_dir), hidden_size=cfg.cap_hidden,
              num_hidden_layers=cfg.cap_layers, num_attention_heads=4, num_key_value_heads=2,
              mrope_section=list(cfg.cap_mrope), vision_hidden_size=cfg.vision_hidden, vision_depth=cfg.vision_depth,
              initializer_range=cfg.cap_init)
    metrics = run_recipe(write_captioner_sft(cfg, seed, init, out))
    if metrics.get("global_step") != cfg.sft_steps:
        raise RuntimeError(f"captioner SFT ran {metrics.get('global_step')} steps, not {cfg.sft_steps}")
    # the trained model (weights, config, processor) becomes the cached captioner itself
    for f in (out / "sft").iterdir():
        if f.is_file():
            os.replace(f, out / f.name)
    image = next((out / "sft_data" / "images").iterdir())
    prompt_tokens = len(caption_prompt_encoding(AutoProcessor.from_pretrained(str(out)), load_image(str(image)))
                        ["input_ids"][0])
    for d in ("init", "sft_data", "sft"):
        shutil.rmtree(out / d, ignore_errors=True)
    gen = GenerationConfig.from_pretrained(str(out))
    gen.do_sample = False
    gen.save_pretrained(str(out))
    return {"kind": "captioner", "seed": seed, "final_loss": metrics["loss_last"], "prompt_tokens": prompt_tokens,
            "trained_by": "vlrl train sft", "sft": {k: metrics.get(k) for k in ("global_step", "loss_first",
                                                                                  "loss_last", "rows")}}


# -- answerer ----------------------------------------------------------------------------------

VALUES = (*W.COLOURS, *W.SHAPES, *W.SIZES, *W.WORDS, *W.NUMBERS, "yes", "no")


def _corrupt(items: list[W.Item], rng: random.Random) -> list[W.Item]:
    """Mis-state one stated attribute (what a hallucinating captioner would write)."""
    cands = [(i, a) for i, it in enumerate(items) for a in ("colour", "shape", "size", "word") if getattr(it, a)]
    if not cands:
        return items
    i, a = rng.choice(cands)
    pool = {"colour": list(W.COLOURS), "shape": W.SHAPES, "size": W.SIZES, "word": W.WORDS}[a]
    items = [replace(it) for it in items]
    setattr(items[i], a, rng.choice([v for v in pool if v != getattr(items[i], a)]))
    return items


def garble(text: str, rng: random.Random) -> str:
    """A broken version of a caption, like a drifting policy writes (see ``ans_garble_p``)."""
    w = text.rstrip(".").split()
    op = rng.randrange(5)
    if op == 0 and len(w) > 3:  # repeat a span
        i = rng.randrange(len(w) - 2)
        k = rng.randint(2, min(5, len(w) - i))
        w = w[: i + k] + w[i : i + k] + w[i + k :]
    elif op == 1 and len(w) > 4:  # drop a span
        i = rng.randrange(len(w) - 1)
        del w[i : i + rng.randint(1, 3)]
    elif op == 2 and len(w) > 2:  # swap neighbours
        i = rng.randrange(len(w) - 1)
        w[i], w[i + 1] = w[i + 1], w[i]
    elif op == 3 and len(w) > 2:  # truncated
        return " ".join(w[: rng.randint(2, len(w) - 1)])
    else:  # items chained with "on", the run-on style of a drifting policy
        phrases = [f"{rng.choice(['a ', ''])}{rng.choice(W.SIZES + ('',))} {rng.choice(list(W.COLOURS))} "
                   f"{rng.choice(W.SHAPES + ('shape',))}".replace("  ", " ").strip() for _ in range(rng.randint(2, 5))]
        return " on ".join(phrases) + rng.choice(["", " on", "."])
    return " ".join(w) + rng.choice([".", ""])


def answerer_examples(cfg: WarmStartConfig, n: int, seed: int, render_request: Callable[[str], str],
                      choice_token: Callable[[str, str], int]) -> list[dict[str, Any]]:
    """``n`` labelled answerer requests, rendered exactly as the caprl_qa reward sends them."""
    from vlrl.core.prompts import render
    from vlrl.methods.caprl.ask import PREFILL
    from vlrl.methods.caprl.mcq import CANNOT_ANSWER, normalize_mcq, present

    rng = random.Random(f"answerer/{seed}")
    world = replace(cfg.world)
    out = []
    scenes = W.make_scenes(n // 4 + 1, seed, world, prefix="ans")
    for sc in scenes:
        stated = W.stated_items(sc, rng, rng.uniform(0, cfg.ans_drop_max))
        if rng.random() < cfg.ans_corrupt_p:
            stated = _corrupt(stated, rng)
        empty = rng.random() < cfg.ans_empty_p
        cap = "" if empty else W.caption_from_items(stated)
        if not empty and rng.random() < cfg.ans_garble_p:
            cap = garble(cap, rng)
        read = None if empty else W.parse_caption(cap)  # what a strict reader gets from the caption
        qs = W.questions(sc, rng)
        for q in rng.sample(qs, min(4, len(qs))):
            mcq = normalize_mcq(q.to_dict())
            pres = present(mcq, rng, CANNOT_ANSWER)
            value = W.answer_from_caption(read, q)
            gold = pres.letters[pres.options.index(value)] if value in pres.options else pres.abstain
            user = render(cfg.answer_prompt, caption=cap, question=mcq.question, options=pres.lines())
            text = render_request(user) + PREFILL
            out.append({"text": text, "gold": choice_token(text, " " + gold),
                        "choices": [choice_token(text, " " + L) for L in pres.letters],
                        "value": VALUES.index(value) if value in VALUES and value in pres.options else len(VALUES)})
            if len(out) >= n:
                return out
    return out


def _fast_render(render_request: Callable[[str], str]) -> Callable[[str], str]:
    """``render_request`` via one template split (the chat template wraps the content verbatim).

    Checked against the real rendering on every 500th call, so a template that transforms the
    content fails loudly instead of training the answerer on the wrong prompts.
    """
    mark = "\x00CONTENT\x00"
    head, _, tail = render_request(mark).partition(mark)
    calls = [0]

    def f(user: str) -> str:
        text = head + user + tail
        calls[0] += 1
        if calls[0] % 500 == 1 and render_request(user) != text:
            raise RuntimeError("answerer chat template does not wrap content verbatim; cannot fast-render")
        return text

    return f


def _fast_choice(choice_token: Callable[[str, str], int]) -> Callable[[str, str], int]:
    """The backend's choice token, memoised by (prompt ending, choice) and spot-checked."""
    memo: dict[tuple[str, str], int] = {}
    calls = [0]

    def f(text: str, choice: str) -> int:
        key = (text[-24:], choice)
        calls[0] += 1
        if key not in memo or calls[0] % 500 == 1:
            tok = choice_token(text, choice)
            if memo.setdefault(key, tok) != tok:
                raise RuntimeError(f"choice token of {choice!r} depends on more than the prompt ending")
        return memo[key]

    return f


def train_answerer(cfg: WarmStartConfig, tok_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vlrl.core.backends.hf import HFBackend
    from vlrl.core.tiny import make_tiny

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    tok.chat_template = ANSWERER_CHAT_TEMPLATE
    make_tiny("qwen2", out, seed=seed, tokenizer=tok, hidden_size=cfg.ans_hidden, num_hidden_layers=cfg.ans_layers,
              num_attention_heads=4, num_key_value_heads=2, initializer_range=cfg.ans_init)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    # The backend the reward will use, around the model being trained: its prompt rendering and
    # choice-token logic label the training data, so training and reward can never disagree.
    backend = HFBackend(model=model, processor=tok, device="cpu", name="answerer-in-training")

    def render_request(user: str) -> str:
        return backend.render_prompt([{"role": "user", "content": user}])

    exs = answerer_examples(cfg, cfg.ans_pool, seed, _fast_render(render_request), _fast_choice(backend.choice_token))
    held = exs[: 1000]
    train = exs[1000:]
    enc = tok([e["text"] for e in exs], add_special_tokens=False)["input_ids"]
    ids_all = [torch.tensor(x) for x in enc]
    gold = torch.tensor([e["gold"] for e in exs])
    value = torch.tensor([e["value"] for e in exs])
    aux = torch.nn.Linear(cfg.ans_hidden, len(VALUES) + 1)
    pad = tok.pad_token_id
    rng = random.Random(f"answerer-batches/{seed}")

    def batch(idx: list[int]):
        L = max(len(ids_all[i]) for i in idx)
        ids = torch.full((len(idx), L), pad, dtype=torch.long)
        attn = torch.zeros((len(idx), L), dtype=torch.long)
        for b, i in enumerate(idx):  # left padding, as the backend pads
            n = len(ids_all[i])
            ids[b, L - n :] = ids_all[i]
            attn[b, L - n :] = 1
        return ids, attn

    def evaluate() -> float:
        model.eval()
        correct = 0
        with torch.no_grad():
            for s in range(0, len(held), 250):
                idx = list(range(s, min(s + 250, len(held))))
                ids, attn = batch(idx)
                logits = model(input_ids=ids, attention_mask=attn).logits[:, -1]
                for b, i in enumerate(idx):
                    ch = held[i]["choices"]
                    correct += int(ch[int(logits[b, ch].argmax())] == held[i]["gold"])
        model.train()
        return correct / len(held)

    n_held = len(held)

    def step_loss(step: int):
        idx = [n_held + rng.randrange(len(train)) for _ in range(cfg.ans_batch)]
        ids, attn = batch(idx)
        h = model.model(input_ids=ids, attention_mask=attn).last_hidden_state[:, -1]
        logits = model.lm_head(h)
        loss = torch.nn.functional.cross_entropy(logits, gold[idx])
        return loss + cfg.aux_weight * torch.nn.functional.cross_entropy(aux(h), value[idx])

    model.train()
    losses = train_steps([*model.parameters(), *aux.parameters()], step_loss, steps=cfg.ans_steps, lr=cfg.ans_lr,
                         name=f"answerer-s{seed}", report=lambda: f"held-out acc {evaluate():.3f}")
    acc = evaluate()
    model.eval()
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return {"kind": "answerer", "seed": seed, "heldout_acc": acc, "final_loss": sum(losses[-50:]) / 50}
