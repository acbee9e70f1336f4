"""The tiny QA answerers of the CapRL demos: the reward's reader and its twin, the judge.

The answerer (a tiny Qwen2 LM) is trained on the very requests the ``caprl_qa`` reward sends: the
reward's own option presentation (:func:`vlrl.methods.caprl.mcq.present`), its prompt template, the
pre-fill, and the ``hf:`` backend's public :meth:`~vlrl.core.backends.hf.HFBackend.render_prompt`
and :meth:`~vlrl.core.backends.hf.HFBackend.choice_token`, so training and use cannot disagree.
Labels follow what the caption *states* (:func:`vlrl.demos.shapes.kit.world.answer_from_caption`),
so an omitted fact means "cannot answer" and a mis-stated one means the mis-stated answer. An
auxiliary head predicting the stated value word at the answer position (training only) is what
makes the letter/value binding learnable at this size.

Why its loop is hand-written rather than a ``vlrl train sft`` recipe: it is trained on one answer
token per request plus an auxiliary head, which no SFT recipe expresses. It takes the demos' shared
step (:func:`vlrl.demos.shapes.tiny_models.train_loop.train_steps`), whose schedule the captioner's
recipe repeats (AdamW without weight decay, 30 warm-up steps then cosine to zero, gradients clipped
to norm 1).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.noise import corrupt, garble
from vlrl.demos.shapes.tiny_models.settings import ANSWERER_CHAT_TEMPLATE, WarmStartConfig
from vlrl.demos.shapes.tiny_models.train_loop import fresh_tiny_lm, train_steps

VALUES = (*W.COLOURS, *W.SHAPES, *W.SIZES, *W.WORDS, *W.NUMBERS, "yes", "no")


def answerer_examples(cfg: WarmStartConfig, n: int, seed: int, render_request: Callable[[str], str],
                      choice_token: Callable[[str, str], int]) -> list[dict[str, Any]]:
    """``n`` labelled answerer requests, rendered exactly as the caprl_qa reward sends them."""
    rng = random.Random(f"answerer/{seed}")
    return label_requests(cfg, n, rng, image_cases(cfg, n, seed, rng), render_request, choice_token)


def image_cases(cfg: WarmStartConfig, n: int, seed: int, rng: random.Random):
    """The shapes world's answerer cases: ``(caption, questions, answer)`` per scene, where
    ``answer(q)`` is what a strict reader of the caption answers (None: "cannot answer")."""
    for sc in answerer_scenes(cfg, n, seed):
        stated = W.stated_items(sc, rng, rng.uniform(0, cfg.ans_drop_max))
        if rng.random() < cfg.ans_corrupt_p:
            stated = corrupt(stated, rng)
        empty = rng.random() < cfg.ans_empty_p
        cap = "" if empty else W.caption_from_items(stated)
        if not empty and rng.random() < cfg.ans_garble_p:
            cap = garble(cap, rng)
        read = None if empty else W.parse_caption(cap)  # what a strict reader gets from the caption
        yield cap, W.questions(sc, rng), lambda q, read=read: W.answer_from_caption(read, q)


def label_requests(cfg: WarmStartConfig, n: int, rng: random.Random, cases, render_request: Callable[[str], str],
                   choice_token: Callable[[str, str], int], values: tuple[str, ...] = VALUES) -> list[dict[str, Any]]:
    """Up to 4 questions of each case as the reward's requests (its option presentation, prompt and
    pre-fill), labelled by the case's reader: the gold letter and the stated value (index in
    ``values``; ``len(values)`` for none). The draws from ``rng`` interleave with the cases' own."""
    from vlrl.core.prompts import render
    from vlrl.methods.caprl.ask import PREFILL
    from vlrl.methods.caprl.mcq import CANNOT_ANSWER, normalize_mcq, present

    out = []
    for cap, qs, answer in cases:
        for q in rng.sample(qs, min(4, len(qs))):
            mcq = normalize_mcq(q.to_dict())
            pres = present(mcq, rng, CANNOT_ANSWER)
            value = answer(q)
            gold = pres.letters[pres.options.index(value)] if value in pres.options else pres.abstain
            user = render(cfg.answer_prompt, caption=cap, question=mcq.question, options=pres.lines())
            text = render_request(user) + PREFILL
            out.append({"text": text, "gold": choice_token(text, " " + gold),
                        "choices": [choice_token(text, " " + L) for L in pres.letters],
                        "value": values.index(value) if value in values and value in pres.options else len(values)})
            if len(out) >= n:
                return out
    return out


def answerer_scenes(cfg: WarmStartConfig, n: int, seed: int) -> list[W.Scene]:
    """The scenes behind ``n`` answerer examples (four questions each): training layouts only."""
    return W.make_scenes(n // 4 + 1, seed, cfg.world, prefix="ans", split="train")


def fast_render(render_request: Callable[[str], str]) -> Callable[[str], str]:
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


def fast_choice(choice_token: Callable[[str, str], int]) -> Callable[[str, str], int]:
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


def train_answerer(cfg: WarmStartConfig, tok_dir: Path, out: Path, seed: int, examples: Callable | None = None,
                   values: tuple[str, ...] = VALUES) -> dict[str, Any]:
    """Train the answerer in ``out``. ``examples`` (default :func:`answerer_examples`, the shapes
    world's) draws the labelled requests with the signature of :func:`answerer_examples`, their
    stated values indexed in ``values`` (another world's answerer, e.g. the video demo's)."""
    import torch

    # The backend the reward will use, around the model being trained: its prompt rendering and
    # choice-token logic label the training data, so training and reward can never disagree.
    model, tok, backend = fresh_tiny_lm(tok_dir, out, seed, chat_template=ANSWERER_CHAT_TEMPLATE, hidden=cfg.ans_hidden,
                                        layers=cfg.ans_layers, init=cfg.ans_init, name="answerer-in-training")

    def render_request(user: str) -> str:
        return backend.render_prompt([{"role": "user", "content": user}])

    exs = (examples or answerer_examples)(cfg, cfg.ans_pool, seed, fast_render(render_request), fast_choice(backend.choice_token))
    held = exs[: 1000]
    train = exs[1000:]
    enc = tok([e["text"] for e in exs], add_special_tokens=False)["input_ids"]
    ids_all = [torch.tensor(x) for x in enc]
    gold = torch.tensor([e["gold"] for e in exs])
    value = torch.tensor([e["value"] for e in exs])
    aux = torch.nn.Linear(cfg.ans_hidden, len(values) + 1)
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
