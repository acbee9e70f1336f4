"""Shared-prefix scoring for exact choice requests on in-process text models.

A QA reward asks one caption many questions: every request of a caption is the same long prefix
(instructions + caption) followed by a short question with its options. Scoring each request from
scratch spends most of the forward pass re-reading the same caption. Here requests whose token ids
share a long common prefix are grouped; the prefix runs once, its KV cache is repeated across the
group, and only the short suffixes run batched on top of it (right-padded, so a real token never
attends to padding under the causal mask). The result is the next-token distribution after each
full prompt, the same quantity a plain forward pass gives (up to float rounding).
"""

from __future__ import annotations

from typing import Any


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


def last_token_probs_shared(net: Any, prefix: list[int], suffixes: list[list[int]], pad_id: int, device: Any,
                            temperature: float = 1.0):
    """Softmax of ``logits / temperature`` over the vocabulary after ``prefix + suffix`` for each
    suffix (one prefix pass); temperature 0 puts all mass on the argmax token."""
    import torch

    n = len(suffixes)
    p = len(prefix)
    width = max(len(s) for s in suffixes)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, p + width), dtype=torch.long)
    mask[:, :p] = 1
    for r, s in enumerate(suffixes):
        ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[r, p : p + len(s)] = 1
    positions = torch.arange(p, p + width).unsqueeze(0).expand(n, -1)
    import inspect

    cache_kw = "cache" if "cache" in inspect.signature(net.forward).parameters else "past_key_values"
    with torch.inference_mode():
        head = net(input_ids=torch.tensor([prefix], device=device), use_cache=True, logits_to_keep=1)
        cache = getattr(head, "cache", None) or head.past_key_values
        cache.batch_repeat_interleave(n)
        out = net(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                  use_cache=True, **{cache_kw: cache})
        last = torch.tensor([len(s) - 1 for s in suffixes], device=device)
        logits = out.logits[torch.arange(n, device=device), last].float()
    return tempered_softmax(logits, temperature)


def tempered_softmax(logits: Any, temperature: float):
    """Row-wise next-token distribution at ``temperature`` (0: one-hot on the argmax)."""
    import torch

    if temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def shared_prefix_probs(net: Any, tokenizer: Any, texts: list[str], device: Any, *, min_shared: int = 32,
                        max_group: int = 64, temperature: float | list[float] = 1.0) -> tuple[dict[int, Any], list[int]]:
    """Next-token probabilities for the texts that share a prefix with others.

    Returns ``({index: probs}, leftover indices)``; leftovers (no partner, or a group that failed)
    are for the caller's plain batched path.
    """
    import logging

    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    temps = temperature if isinstance(temperature, list) else [temperature] * len(texts)
    done: dict[int, Any] = {}
    rest: list[int] = []
    for shared, idx in group_by_prefix(ids, min_shared=min_shared, max_group=max_group):
        if not shared or len({temps[i] for i in idx}) > 1:
            rest.extend(idx)
            continue
        try:
            probs = last_token_probs_shared(net, ids[idx[0]][:shared], [ids[i][shared:] for i in idx],
                                            tokenizer.pad_token_id, device, temps[idx[0]])
        except Exception as e:  # noqa: BLE001 - fall back to plain scoring for this group
            logging.getLogger(__name__).warning("shared-prefix scoring failed (%s); scoring %d requests plainly", e, len(idx))
            rest.extend(idx)
            continue
        for r, i in enumerate(idx):
            done[i] = probs[r]
    return done, sorted(rest)
