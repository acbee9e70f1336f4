"""In-process ``transformers`` backend: VLMs and text LMs, CPU or GPU, batched with left padding.

Why in-process at all when vLLM exists: tests, the CPU demo, notebooks and small answerers/judges
(a 0.5-3B text model next to the policy) need no server, and ``score_choices`` can read the exact
next-token distribution from the logits in one forward pass — the cheapest possible exact QA reward.

Batching: requests are grouped by sampling parameters (``generate`` takes one set per call), sorted
by prompt length so a batch pads little, and cut into ``batch_size`` chunks. A request whose image
fails to load gets its own error; a batch that fails as a whole (e.g. out of memory) is retried one
request at a time so a single bad request cannot take its neighbours down.

Seeding: sampling never touches torch's global RNG (a policy sharing the process must not see its
random stream reset on every reward call). Each sampled sequence draws its tokens from its own
``torch.Generator`` seeded from the request's ``seed`` and the sample's index, through a logits
processor that picks the token and hands ``generate`` a one-hot row, so a request's samples are the
same whichever other requests share its batch, and a rerun reproduces them. Unseeded requests get a
fresh random seed each.

Exact choice scoring reads the next-token distribution at the request's temperature over the full
vocabulary and adds up every token that reads as a choice (:func:`choice_of_token`: ``"A"``,
``" A"``, ``"\nA"``), the same rule the HTTP backend applies to ``top_logprobs``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from vlrl.core.backends.base import (
    Backend,
    BackendError,
    ChatRequest,
    ChatResult,
    ChoiceRequest,
    ChoiceResult,
    SamplingParams,
    choice_of_token,
)
from vlrl.core.progress import requests_done

logger = logging.getLogger(__name__)


def _load_image(image: Any, record: str | None):
    try:
        from vlrl.core.images import load_image
    except ImportError:  # pragma: no cover - images module is part of the package
        from PIL import Image

        return image if isinstance(image, Image.Image) else Image.open(image).convert("RGB")
    return load_image(image, record=record)


def _load_video(video: Any, record: str | None):
    """A request's video part: a decoded :class:`~vlrl.core.video.Clip`, or a file decoded here."""
    from vlrl.core.video import Clip, load_video

    return video if isinstance(video, Clip) else load_video(video, record=record)


def _named(record: str, err: Exception) -> str:
    """One-line error naming the record once (image errors already carry it)."""
    msg = str(err).splitlines()[0] if str(err) else type(err).__name__
    return msg if msg.startswith(f"{record}:") else f"{record}: {msg}"


class HFBackend(Backend):
    kind = "hf"
    raw_prompts = True

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 16,
        model: Any = None,
        processor: Any = None,
        name: str | None = None,
    ) -> None:
        import torch

        if model is None:
            if path is None:
                raise BackendError("HFBackend needs a model folder or a loaded model")
            path = str(path)
            if not path.strip():
                raise BackendError("hf backend: no model folder given (use 'hf:PATH')")
            from vlrl.core.tiny import resolve_model_ref

            path = resolve_model_ref(path)
            if not Path(path).exists():
                raise BackendError(f"hf backend: model folder {path!r} does not exist (the hub is not used)")
        super().__init__(name or str(Path(path).resolve()) if path else (name or "in-memory"))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.device = torch.device(device)
        except (RuntimeError, ValueError):
            raise BackendError(f"hf backend: device={device!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise BackendError(f"hf backend: device={device!r} but no CUDA device is available")
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise BackendError(f"hf backend: batch_size must be >= 1, got {self.batch_size}")
        if model is None:
            try:
                model, processor = self._load(path, dtype)
            except BackendError:
                raise
            except Exception as e:  # noqa: BLE001 - not a model folder, broken config, bad weights...
                reason = " ".join(str(e).split())[:300] or type(e).__name__
                raise BackendError(f"hf backend: cannot load a model from {path!r}: {reason}") from None
        self.net = model.to(self.device).eval()
        self._dtype = next(self.net.parameters()).dtype
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.is_vlm = hasattr(model.config, "vision_config")
        self._weights_tag = self._fingerprint(path) if path else hex(id(model))

    @classmethod
    def from_spec(cls, target: str, **opts: str) -> HFBackend:
        known = {"device", "dtype", "batch_size"}
        unknown = set(opts) - known
        if unknown:
            raise ValueError(f"hf backend: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
        try:
            batch_size = int(opts.get("batch_size", 16))
        except ValueError:
            raise BackendError(f"hf backend: batch_size={opts['batch_size']!r} is not an integer") from None
        return cls(target, device=opts.get("device", "auto"), dtype=opts.get("dtype", "auto"), batch_size=batch_size)

    @staticmethod
    def _load(path: str, dtype: str):
        import torch
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForImageTextToText,
            AutoProcessor,
            AutoTokenizer,
        )

        cfg = AutoConfig.from_pretrained(path)
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
        elif isinstance(getattr(torch, dtype, None), torch.dtype) and getattr(torch, dtype).is_floating_point:
            torch_dtype = getattr(torch, dtype)
        else:
            raise BackendError(f"hf backend: dtype={dtype!r} is not a torch floating dtype (float32, bfloat16, float16)")
        if hasattr(cfg, "vision_config"):
            model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch_dtype)
            processor = AutoProcessor.from_pretrained(path)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
            processor = AutoTokenizer.from_pretrained(path)
        return model, processor

    @staticmethod
    def _fingerprint(path: str) -> str:
        """Weights identity for the cache: retraining into the same folder must not hit old answers."""
        h = hashlib.sha1()
        for f in sorted(Path(path).glob("*.safetensors")) + sorted(Path(path).glob("*.bin")):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()[:16]

    def identity(self) -> dict[str, Any]:
        # dtype changes answers (bf16 vs fp32 greedy text and choice probabilities differ)
        return {"kind": self.kind, "model": self.model, "weights": self._weights_tag, "dtype": str(self._dtype)}

    # -- prompt building ---------------------------------------------------------------------------
    def render_prompt(self, messages: list[dict[str, Any]]) -> str:
        """The exact text this backend feeds the model for ``messages`` (chat template applied).

        A conversation ending in an assistant turn is continued (the pre-fill of exact choice
        scoring); otherwise the template's generation prompt is added. Image parts become the
        processor's image placeholders; the images themselves are not loaded.

        Public so that code training a model to be *used through this backend* (a judge, a
        reward answerer) can build its training text from the very prompts the backend will
        send, instead of re-implementing the template: training and use then cannot disagree.
        """
        norm = [{**m, "content": [p if p.get("type") != "image" else {"type": "image"} for p in m["content"]]}
                if isinstance(m.get("content"), list) else m for m in messages]
        return self._render(norm, None, load_images=False)[0]

    def choice_token(self, prompt: str, choice: str) -> int:
        """The token the tokenizer writes first for ``choice`` after ``prompt``: the label to train on.

        ``prompt`` is rendered text (:meth:`render_prompt` plus any pre-fill); ``choice`` is the
        text the model would write next (``" A"``). :meth:`score_choices` reads this token together
        with every other token that spells the same choice (:meth:`choice_token_ids`), so a model
        trained to answer through this backend should put its label on this one.
        """
        return self._choice_token(prompt, choice)

    def choice_token_ids(self, prompt: str, choice: str) -> list[int]:
        """Every token whose probability :meth:`score_choices` counts for ``choice`` (``"A"``,
        ``" A"``, ``"\\nA"``, ...): their summed, tempered probability is the choice's score."""
        return self._choice_ids(prompt, choice)

    def _render(self, messages: list[dict[str, Any]], record: str | None,
                load_images: bool = True) -> tuple[str, list[Any]]:
        """Chat-template text and loaded images of one conversation."""
        images = []
        norm = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, list):
                parts = []
                for p in content:
                    if p.get("type") == "video":
                        if not self.is_vlm:
                            raise ValueError("this model is text-only but the request contains a video")
                        if load_images:
                            images.append(_load_video(p["video"], record))
                        parts.append({"type": "video"})
                    elif p.get("type") == "image":
                        if not self.is_vlm:
                            raise ValueError("this model is text-only but the request contains an image")
                        if load_images:
                            images.append(_load_image(p["image"], record))
                        parts.append({"type": "image"})
                    else:
                        parts.append({"type": "text", "text": p.get("text", "")})
                if not self.is_vlm:
                    parts = "".join(p["text"] for p in parts)
                norm.append({**m, "content": parts})
            else:
                norm.append(m)
        cont = bool(norm) and norm[-1]["role"] == "assistant"
        text = self.processor.apply_chat_template(
            norm, tokenize=False, add_generation_prompt=not cont, continue_final_message=cont
        )
        return text, images

    def _encode(self, texts: list[str], images: list[list[Any]]):
        from vlrl.core.video import Clip

        flat = [im for ims in images for im in ims if not isinstance(im, Clip)]
        clips = [im for ims in images for im in ims if isinstance(im, Clip)]
        if self.is_vlm and clips:
            # Frames are already chosen and sized by qwen-vl-utils' rules (vlrl.core.video); the
            # processor is told which source frames they are, for its temporal positions.
            meta = [{"fps": c.source_fps, "frames_indices": c.meta.get("frames_indices", list(range(len(c.frames)))),
                     "total_num_frames": c.total_frames} for c in clips]
            enc = self.processor(text=texts, images=flat or None, videos=[c.frames for c in clips], video_metadata=meta,
                                 do_sample_frames=False, padding=True, return_tensors="pt")
        elif self.is_vlm:
            enc = self.processor(text=texts, images=flat or None, padding=True, return_tensors="pt")
        else:
            enc = self.tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        return {k: v.to(self.device) for k, v in enc.items()}

    # -- chat --------------------------------------------------------------------------------------
    def _chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        results: list[ChatResult | None] = [None] * len(requests)
        prepared: dict[SamplingParams, list[tuple[int, str, list[Any], int | None]]] = defaultdict(list)
        for i, r in enumerate(requests):
            try:
                # a raw prompt is encoded as it is, like a rendered conversation (no template)
                text, images = (r.prompt, []) if r.prompt is not None else self._render(r.messages, r.id)
            except Exception as e:  # noqa: BLE001 - one bad record must not sink the batch
                results[i] = ChatResult(error=_named(r.id or f"request {i}", e))
                continue
            # group by everything but the seed: per-request seeds must not cost one generate call each
            prepared[dataclasses.replace(r.sampling, seed=None)].append((i, text, images, r.sampling.seed))
        for sampling, items in prepared.items():
            items.sort(key=lambda it: len(it[1]))
            for start in range(0, len(items), self.batch_size):
                chunk = items[start : start + self.batch_size]
                try:
                    outs = self._generate([c[1] for c in chunk], [c[2] for c in chunk], sampling, [c[3] for c in chunk])
                except Exception as e:  # noqa: BLE001
                    if len(chunk) == 1:
                        outs = [ChatResult(error=f"{requests[chunk[0][0]].id or 'request'}: generation failed: {e}")]
                    else:
                        logger.warning("batch of %d failed (%s); retrying one by one", len(chunk), e)
                        outs = []
                        for c in chunk:
                            try:
                                outs.extend(self._generate([c[1]], [c[2]], sampling, [c[3]]))
                            except Exception as e1:  # noqa: BLE001
                                outs.append(ChatResult(error=f"{requests[c[0]].id or 'request'}: generation failed: {e1}"))
                for (i, *_), res in zip(chunk, outs, strict=False):
                    results[i] = res
                requests_done(len(chunk))
        return [r if r is not None else ChatResult(error="not processed") for r in results]

    def _generate(
        self, texts: list[str], images: list[list[Any]], sp: SamplingParams, seeds: list[int | None] | None = None
    ) -> list[ChatResult]:
        import torch

        # n samples per request: the prompt is repeated n times (row b*n+k is sample k of request b),
        # since greedy ``generate`` refuses num_return_sequences > 1.
        enc = self._encode([t for t in texts for _ in range(sp.n)], [im for im in images for _ in range(sp.n)])
        # Sampling is done by a per-row sampler (own generators) on top of greedy decoding: the
        # global RNG is never read or reseeded (see the module doc). The request's settings are the
        # whole distribution: the model's generation_config (Qwen2.5 Instruct ships a repetition
        # penalty of 1.05, which the public CapRL reward does not use) adds nothing.
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": sp.max_tokens,
            "do_sample": False,
            "pad_token_id": self.tokenizer.pad_token_id,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "repetition_penalty": 1.0,
        }
        if sp.temperature > 0:
            from transformers import LogitsProcessorList

            seeds = seeds if seeds is not None else [sp.seed] * len(texts)
            gens = [_row_generator(seeds[b], k, self.device) for b in range(len(texts)) for k in range(sp.n)]
            gen_kwargs["logits_processor"] = LogitsProcessorList([_RowSampler(gens, sp.temperature, sp.top_p, sp.top_k)])
        with torch.inference_mode():
            out = self.net.generate(**enc, **gen_kwargs)
        prompt_len = enc["input_ids"].shape[1]
        new = out[:, prompt_len:]
        eos_ids = set(self._eos_ids())
        results = []
        for b in range(len(texts)):
            rows = new[b * sp.n : (b + 1) * sp.n]
            texts_b, reasons, ntok = [], [], 0
            for row in rows:
                ids = row.tolist()
                # count real tokens: up to and including the first eos, excluding padding
                n_real = next((k + 1 for k, t in enumerate(ids) if t in eos_ids), len(ids))
                ntok += n_real
                text = self.tokenizer.decode(ids[:n_real], skip_special_tokens=True)
                reason = "stop" if n_real < len(ids) or (ids and ids[n_real - 1] in eos_ids) else "length"
                for s in sp.stop:
                    if s in text:
                        text, reason = text.split(s, 1)[0], "stop"
                texts_b.append(text)
                reasons.append(reason)
            p_len = int(enc["attention_mask"][b * sp.n].sum())
            results.append(ChatResult(texts=texts_b, finish_reasons=reasons, prompt_tokens=p_len, completion_tokens=ntok))
        return results

    def _eos_ids(self) -> list[int]:
        eos = self.net.generation_config.eos_token_id
        ids = eos if isinstance(eos, list) else [eos]
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return [i for i in ids if i is not None]

    # -- exact choice scoring ----------------------------------------------------------------------
    def _choice_token(self, prompt: str, choice: str) -> int:
        """First token the model would emit to write ``choice`` right after ``prompt``.

        Only the prompt's tail can merge with the choice, so the tail is tokenized, and the answer
        is memoised per (tail, choice): a batch of QA asks shares one tail ("...The answer is").
        """
        tail = prompt[-64:]
        key = (tail, choice)
        memo = self.__dict__.setdefault("_choice_memo", {})
        if key not in memo:
            memo[key] = self._choice_token_uncached(tail, choice)
        return memo[key]

    def _choice_token_uncached(self, prompt: str, choice: str) -> int:
        base = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full = self.tokenizer(prompt + choice, add_special_tokens=False)["input_ids"]
        k = 0
        while k < min(len(base), len(full)) and base[k] == full[k]:
            k += 1
        if k < len(base):  # the choice merged with the prompt's last token: score the choice alone
            return self.tokenizer(choice, add_special_tokens=False)["input_ids"][0]
        return full[k]

    def _choice_ids(self, prompt: str, choice: str) -> list[int]:
        """Every vocabulary token that reads as ``choice`` (see :func:`choice_of_token`).

        A choice no single token spells (a multi-token answer) falls back to the first token the
        tokenizer would emit for it after ``prompt``.
        """
        ids = self._token_variants().get(choice.strip())
        return list(ids) if ids else [self._choice_token(prompt, choice)]

    def _token_variants(self) -> dict[str, tuple[int, ...]]:
        """Stripped text → ids of the non-special tokens that decode to it (built once)."""
        table = self.__dict__.get("_variants")
        if table is None:
            special = set(self.tokenizer.all_special_ids)
            vocab_size = len(self.tokenizer)
            texts = self.tokenizer.batch_decode([[i] for i in range(vocab_size)])
            grouped: dict[str, list[int]] = defaultdict(list)
            for i, t in enumerate(texts):
                core = t.strip()
                if core and i not in special and choice_of_token(t, [core]) is not None:
                    grouped[core].append(i)
            table = self._variants = {k: tuple(v) for k, v in grouped.items()}
        return table

    def _score_choices(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        import torch

        from vlrl.core.backends.prefix_share import tempered_softmax

        results: list[ChoiceResult | None] = [None] * len(requests)
        items = []
        for i, r in enumerate(requests):
            try:
                if r.prefix:
                    # the prefix is a partial assistant turn, rendered exactly as sample mode's
                    # pre-fill is (templates such as Qwen3's add to an assistant turn's start)
                    text, images = self._render([*r.messages, {"role": "assistant", "content": r.prefix}], r.id)
                else:
                    text, images = self._render(r.messages, r.id)
                tokens = [self._choice_ids(text, c) for c in r.choices]
                flat = [t for ts in tokens for t in ts]
                if len(set(flat)) != len(flat):
                    raise ValueError(f"choices {r.choices} share a first token; make them differ in their first token")
            except Exception as e:  # noqa: BLE001
                results[i] = ChoiceResult(error=_named(r.id or f"request {i}", e))
                continue
            items.append((i, text, images, tokens))

        def finish(i: int, row: Any, tokens: list[list[int]]) -> None:
            # one gather per row (not one per choice): a row is a whole-vocabulary distribution
            flat = row[torch.tensor([t for ids in tokens for t in ids], device=row.device)].tolist()
            p, k = [], 0
            for ids in tokens:
                p.append(sum(flat[k : k + len(ids)]))
                k += len(ids)
            mass = sum(p)
            choices = requests[i].choices
            norm = {c: (v / mass if mass > 0 else 1.0 / len(choices)) for c, v in zip(choices, p, strict=True)}
            results[i] = ChoiceResult(probs=norm, method="logits", mass=min(mass, 1.0))

        if not self.is_vlm and len(items) > 1:
            # QA asks share a long prefix (instructions + caption): run it once per group, and the
            # prefixes of several groups in one forward pass (up to batch_size asks per pass)
            from vlrl.core.backends.prefix_share import shared_prefix_probs

            done, rest = shared_prefix_probs(self.net, self.tokenizer, [it[1] for it in items], self.device,
                                             max_group=self.batch_size,
                                             temperature=[requests[it[0]].temperature for it in items])
            for k, row_probs in done.items():
                finish(items[k][0], row_probs, items[k][3])
            requests_done(len(done))
            items = [items[k] for k in rest]
        items.sort(key=lambda it: len(it[1]))
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            try:
                enc = self._encode([c[1] for c in chunk], [c[2] for c in chunk])
                with torch.inference_mode():
                    # logits_to_keep=1: only the last position's logits (not seq x vocab floats)
                    logits = self.net(**enc, logits_to_keep=1).logits[:, -1, :].float()
            except Exception as e:  # noqa: BLE001
                for c in chunk:
                    results[c[0]] = ChoiceResult(error=f"{requests[c[0]].id or 'request'}: scoring failed: {e}")
                requests_done(len(chunk))
                continue
            for row, (i, _, _, tokens) in enumerate(chunk):
                finish(i, tempered_softmax(logits[row : row + 1], requests[i].temperature)[0], tokens)
            requests_done(len(chunk))
        return [r if r is not None else ChoiceResult(error="not processed") for r in results]

    def close(self) -> None:
        self.net = None
        super().close()


def _row_generator(seed: int | None, sample: int, device: Any):
    """The generator of one sampled sequence: (request seed, sample index), or fresh when unseeded."""
    import secrets

    import torch

    g = torch.Generator(device=device)
    if seed is None:
        g.manual_seed(secrets.randbits(63))
    else:
        digest = hashlib.sha256(f"vlrl-hf-sample/{seed}/{sample}".encode()).digest()
        g.manual_seed(int.from_bytes(digest[:8], "big") >> 1)
    return g


class _RowSampler:
    """Logits processor that samples each row with its own generator and returns a one-hot row.

    ``generate`` runs greedy, so the argmax of the returned row is the sampled token: temperature,
    top-k and top-p are applied here, and torch's global RNG is never consumed.
    """

    def __init__(self, generators: list[Any], temperature: float, top_p: float, top_k: int) -> None:
        self.generators = generators
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        logits = scores.float() / self.temperature
        if self.top_k > 0:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, -math.inf)
        probs = torch.softmax(logits, dim=-1)
        if self.top_p < 1:
            sorted_p, order = torch.sort(probs, dim=-1, descending=True)
            drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= self.top_p
            probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        # one draw per row from that row's own generator, then a single scatter for the whole batch
        # (per-row indexing writes cost more than the draws on a small model)
        toks = torch.cat([torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(self.generators)])
        return torch.full_like(scores, -math.inf).scatter_(-1, toks.view(-1, 1), 0.0)
