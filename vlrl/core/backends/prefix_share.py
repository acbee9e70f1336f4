"""Shared-prefix scoring for exact choice requests on in-process text models.

A QA reward asks one caption many questions: every request of a caption is the same long prefix
(instructions + caption) followed by a short question with its options. Scoring each request from
scratch spends most of the forward pass re-reading the same caption. Here requests whose token ids
share a long common prefix are grouped; the prefix runs once, its KV cache is copied to each member
of the group, and only the short suffixes run on top of it. The result is the next-token
distribution after each full prompt, the same quantity a plain forward pass gives (up to float
rounding).

Several groups (the captions of a batch) run *together*: one forward pass over all their prefixes,
then one over all their suffixes, instead of two passes per caption. On a small answerer the cost
of a pass is mostly fixed per call, so at one round per question (about four distinct asks per
caption) per-caption passes were most of exact mode's time. How the padding stays invisible:

* prefixes are **right**-padded to the longest one. Under the causal mask a real token only sees
  the tokens before it, so the real tokens' keys and values are exactly those of an unpadded pass
  (and a padding query always has real tokens to attend to, so nothing is fully masked);
* suffixes are placed after the longest prefix and **left**-padded, so every row's answer is read
  at the last position and the vocabulary projection runs for one position per row. Each row's
  attention mask covers its own prefix's real tokens and its own suffix's real tokens (a padding
  query still sees its prefix), and its position ids continue from its own prefix's length, so
  rotary positions are those of the unpadded prompt.

Right-padding a prefix is only invisible to attention layers that see the whole past. A model
whose cache holds anything else (sliding windows, linear-attention state, quantised layers) is
scored one prefix per pass, with its suffixes placed right after the prefix and right-padded
(a sliding window counts cached slots, so left padding inside it would hide real tokens)
(:func:`_plain_attention_cache`).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

logger = logging.getLogger(__name__)

# models seen to keep more than full attention in their cache (see _plain_attention_cache)
_ONE_PREFIX_PER_PASS: weakref.WeakSet = weakref.WeakSet()


def group_by_prefix(token_lists: list[list[int]], *, min_shared: int = 32, max_group: int = 64) -> list[tuple[int, list[int]]]:
    """Groups of request indices sharing at least ``min_shared`` leading tokens.

    Returns ``(shared_length, indices)`` per group; ``shared_length`` is always shorter than every
    member (each keeps at least one token of its own, whose logits are the answer). Requests with
    no partner come back as groups of one with ``shared_length`` 0.
    """
    order = sorted(range(len(token_lists)), key=lambda i: token_lists[i])
    groups: list[tuple[int, list[int]]] = []
    cur: list[int] = []
    shared = 0
    for i in order:
        if cur:
            lcp = _lcp(token_lists[cur[0]], token_lists[i], shared if len(cur) > 1 else None)
            lcp = min(lcp, len(token_lists[i]) - 1, min(len(token_lists[j]) for j in cur) - 1)
            # join only if the group keeps most of its shared prefix (asks of one caption stay
            # together; a neighbour sharing just the instructions starts a new group)
            if lcp >= min_shared and len(cur) < max_group and (len(cur) == 1 or lcp >= 0.75 * shared):
                cur.append(i)
                shared = lcp
                continue
            groups.append((shared if len(cur) > 1 else 0, cur))
        cur, shared = [i], 0
    if cur:
        groups.append((shared if len(cur) > 1 else 0, cur))
    return groups


def _lcp(a: list[int], b: list[int], limit: int | None) -> int:
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def pack_groups(prefix_lengths: list[int], sizes: list[int], *, max_rows: int, max_prefixes: int) -> list[list[int]]:
    """Packs of group indices run together: at most ``max_rows`` suffix rows and ``max_prefixes``
    prefixes per pack (a group larger than ``max_rows`` is a pack of its own).

    Groups are taken in order of prefix length, so a pack pads its prefixes little. The row bound
    keeps a pack's memory that of a plain batch: each suffix row holds a copy of its prefix's cache,
    as each prompt of a plain batch holds its own.
    """
    packs: list[list[int]] = []
    cur: list[int] = []
    rows = 0
    for g in sorted(range(len(sizes)), key=lambda g: prefix_lengths[g]):
        if cur and (rows + sizes[g] > max_rows or len(cur) >= max_prefixes):
            packs.append(cur)
            cur, rows = [], 0
        cur.append(g)
        rows += sizes[g]
    if cur:
        packs.append(cur)
    return packs


def _plain_attention_cache(cache: Any) -> bool:
    """True when every cache layer is a plain full-attention layer (padding after the prefix is
    then masked out exactly); caches without per-layer objects are not trusted with padding."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def last_token_probs_packed(net: Any, prefixes: list[list[int]], suffixes: list[list[list[int]]], pad_id: int,
                            device: Any, temperatures: list[float]):
    """Tempered next-token distributions after ``prefixes[g] + s`` for every suffix ``s`` of
    ``suffixes[g]``, rows in order (group 0's suffixes first), from one prefix pass and one suffix
    pass; ``temperatures`` has one entry per row. Returns ``None`` (nothing computed that counts)
    when several prefixes were given and the model's cache cannot hide right padding."""
    import inspect

    import torch

    n_groups = len(prefixes)
    plen = [len(p) for p in prefixes]
    width_p = max(plen)
    rows = [(g, s) for g in range(n_groups) for s in suffixes[g]]
    n = len(rows)
    width_s = max(len(s) for _, s in rows)
    head_ids = torch.full((n_groups, width_p), pad_id, dtype=torch.long)
    head_mask = torch.zeros((n_groups, width_p), dtype=torch.long)
    for g, p in enumerate(prefixes):
        head_ids[g, : len(p)] = torch.tensor(p, dtype=torch.long)
        head_mask[g, : len(p)] = 1
    cache_kw = "cache" if "cache" in inspect.signature(net.forward).parameters else "past_key_values"
    with torch.inference_mode():
        head = net(input_ids=head_ids.to(device), attention_mask=head_mask.to(device),
                   position_ids=torch.arange(width_p).unsqueeze(0).expand(n_groups, -1).to(device),
                   use_cache=True, logits_to_keep=1)
        cache = getattr(head, "cache", None) or head.past_key_values
        plain = _plain_attention_cache(cache)
        if n_groups > 1 and not plain:
            return None
        # Plain attention: suffixes left-padded, every answer at the last position (one vocabulary
        # projection per row). Anything else (a sliding window counts cached slots, padding
        # included): suffixes right after the prefix, right-padded, each answer read at its own end.
        ids = torch.full((n, width_s), pad_id, dtype=torch.long)
        mask = torch.zeros((n, width_p + width_s), dtype=torch.long)
        positions = torch.zeros((n, width_s), dtype=torch.long)
        last = torch.full((n,), width_s - 1, dtype=torch.long)
        for r, (g, s) in enumerate(rows):
            gap = width_s - len(s) if plain else 0
            ids[r, gap : gap + len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, : plen[g]] = 1
            mask[r, width_p + gap : width_p + gap + len(s)] = 1
            positions[r] = torch.arange(plen[g] - gap, plen[g] - gap + width_s).clamp(min=0)
            last[r] = gap + len(s) - 1
        cache.reorder_cache(torch.tensor([g for g, _ in rows], dtype=torch.long, device=device))
        out = net(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                  use_cache=True, logits_to_keep=1 if plain else 0, **{cache_kw: cache})
        logits = out.logits[:, -1] if plain else out.logits[torch.arange(n), last.to(out.logits.device)]
        logits = logits.float()
    return tempered_softmax(logits, temperatures)


def last_token_probs_shared(net: Any, prefix: list[int], suffixes: list[list[int]], pad_id: int, device: Any,
                            temperature: float = 1.0):
    """Softmax of ``logits / temperature`` over the vocabulary after ``prefix + suffix`` for each
    suffix (one prefix pass); temperature 0 puts all mass on the argmax token."""
    return last_token_probs_packed(net, [prefix], [suffixes], pad_id, device, [temperature] * len(suffixes))


def tempered_softmax(logits: Any, temperature: float | list[float]):
    """Row-wise next-token distribution at ``temperature`` (one value, or one per row; 0: one-hot
    on the argmax)."""
    import torch

    temps = temperature if isinstance(temperature, list) else [temperature] * logits.shape[0]
    if all(t == temps[0] for t in temps):
        if temps[0] <= 0:
            return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
        return torch.softmax(logits / temps[0], dim=-1)
    return torch.cat([tempered_softmax(logits[r : r + 1], t) for r, t in enumerate(temps)])


def shared_prefix_probs(net: Any, tokenizer: Any, texts: list[str], device: Any, *, min_shared: int = 32,
                        max_group: int = 64, temperature: float | list[float] = 1.0,
                        max_prefixes: int | None = None) -> tuple[dict[int, Any], list[int]]:
    """Next-token probabilities for the texts that share a prefix with others.

    Groups are packed (:func:`pack_groups`) with at most ``max_group`` suffix rows and
    ``max_prefixes`` (default ``max_group``) prefixes per pack. Returns ``({index: probs}, leftover
    indices)``; leftovers (no partner, or a pack that failed) are for the caller's plain batched path.
    """
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    temps = temperature if isinstance(temperature, list) else [temperature] * len(texts)
    done: dict[int, Any] = {}
    rest: list[int] = []
    groups: list[tuple[int, list[int]]] = []
    for shared, idx in group_by_prefix(ids, min_shared=min_shared, max_group=max_group):
        if shared:
            groups.append((shared, idx))
        else:
            rest.extend(idx)
    one_at_a_time = net in _ONE_PREFIX_PER_PASS
    packs = pack_groups([s for s, _ in groups], [len(idx) for _, idx in groups], max_rows=max_group,
                        max_prefixes=1 if one_at_a_time else (max_prefixes or max_group))
    queue = list(packs)
    while queue:
        pack = queue.pop(0)
        members = [i for g in pack for i in groups[g][1]]
        try:
            probs = last_token_probs_packed(
                net, [ids[groups[g][1][0]][: groups[g][0]] for g in pack],
                [[ids[i][groups[g][0]:] for i in groups[g][1]] for g in pack],
                tokenizer.pad_token_id, device, [temps[i] for i in members])
        except Exception as e:  # noqa: BLE001 - fall back to plain scoring for this pack
            logger.warning("shared-prefix scoring failed (%s); scoring %d requests plainly", e, len(members))
            rest.extend(members)
            continue
        if probs is None:  # this model's cache cannot hide padding: one prefix per pass from now on
            logger.info("shared-prefix scoring: %s keeps more than full attention in its cache; one prefix per pass",
                        type(net).__name__)
            _ONE_PREFIX_PER_PASS.add(net)
            queue = [[g] for p in [pack, *queue] for g in p]
            continue
        for r, i in enumerate(members):
            done[i] = probs[r]
    return done, sorted(rest)
