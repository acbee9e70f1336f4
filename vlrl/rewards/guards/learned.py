"""The learned guard: a linear model over hashed words, for hacks no pattern foresaw.

The pattern guards catch what their authors imagined. On held-out corpora written by authors who saw
neither the patterns nor the earlier corpora, they miss one hack in seven to one in four (the blind
pairs in ``docs/rubicap.md``). Each round of new patterns gained little on the next author. A model
trained on every labelled caption the project holds generalises from wording. Both sides count: the
hacks, and the hard honest captions that look like them. The guard reads words it has seen in other
hacks, not one hand-written shape.

* **Features.** Hashed word unigrams and bigrams of the normalised, lower-case caption (numbers folded
  to their length class, punctuation kept as tokens: "Q:", "[x]" and "10/10" are evidence too). For
  scripts written without spaces (Chinese, Japanese, Thai, Korean), character bigrams as well. Each
  caption is a binary vector over :data:`DIM` buckets (CRC-32), scaled to unit length.
* **Model.** Logistic regression with balanced class weights (scikit-learn at training time only).
  Scoring one caption is a sum of its buckets' weights, about 0.1 ms (``vlrl bench guards``). scikit-learn's
  own vectoriser costs 0.3 ms a caption when captions come one at a time, as the guards see them.
* **Threshold.** The guard fires when the model's probability of a hack is ``threshold`` (0.8) or more.
  The default was chosen by leaving out each blind author's pair in turn, training on the rest, and
  keeping the pooled false positives on the held-out honest captions under 1%.
* **Opt-in.** Enable it with ``enabled: [..., learned]``. Its errors follow the corpora it learned from:
  captions written by other models in styles a policy may never use. On one held-out author it
  flagged 6% of the honest captions, casual lower-case ones mostly. The docs give every number.

A model file (``.npz``: the weights, the bias and a JSON header, read without pickle) ships in
``data/learned_guard.npz``. It was trained by ``make learned-guard`` on the corpora of
``tests/fixtures/guard_*.jsonl``. ``vlrl reward guard-train`` trains one on your own labelled
rollouts: hacks your policy found and honest captions of your domain.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from vlrl.rewards.guards.base import Guard, register_guard
from vlrl.rewards.guards.doc import LETTERS, Doc

DIM = 1 << 18
MODEL = Path(__file__).parent / "data" / "learned_guard.npz"
_TOKEN = re.compile(rf"{LETTERS.pattern}|\d+|[^\w\s]")
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def _tokens(text: str) -> list[str]:
    """Word, number and punctuation tokens of normalised, lower-case text; a number becomes its length
    class ("0" for one or two digits, "00" for more), so "9/10" and "8/10" are one token pair."""
    return [("0" if len(t) < 3 else "00") if t.isdigit() else t for t in _TOKEN.findall(text)]


def features(text: str) -> list[int]:
    """The sorted, distinct buckets of a caption's words, word pairs and (unspaced scripts) character pairs."""
    toks = _tokens(text)
    grams = {"w " + t for t in toks}
    grams.update("b " + a + " " + b for a, b in zip(toks, toks[1:], strict=False))
    for t in toks:
        if len(t) > 1 and _UNSPACED.search(t):
            grams.update("c " + t[i:i + 2] for i in range(len(t) - 1))
    return sorted({zlib.crc32(g.encode()) & (DIM - 1) for g in grams})


def caption_text(doc: Doc) -> str:
    """What the model reads: the normalised caption, lower case (quotes kept: the model learns when a
    quotation is a sign and when it is an order to the grader)."""
    return doc.norm.lower()


class LearnedModel:
    """Weights over :data:`DIM` hashed buckets, a bias, and a header saying what it was trained on."""

    def __init__(self, weights: np.ndarray, bias: float, meta: dict[str, Any]) -> None:
        if weights.shape != (DIM,):
            raise ValueError(f"learned guard model: {weights.shape[0]} weights, expected {DIM}")
        self.weights = weights.astype(np.float32)
        self.bias = float(bias)
        self.meta = meta

    def probability(self, text: str) -> float:
        """The model's probability that ``text`` (see :func:`caption_text`) is a hack."""
        idx = features(text)
        if not idx:
            return 1.0 / (1.0 + np.exp(-self.bias))
        z = float(self.weights[idx].sum()) / np.sqrt(len(idx)) + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, weights=self.weights.astype(np.float16), bias=np.float64(self.bias),
                            meta=np.array(json.dumps(self.meta, sort_keys=True)))

    @classmethod
    def load(cls, path: str | Path) -> LearnedModel:
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(z["weights"].astype(np.float32), float(z["bias"]), json.loads(str(z["meta"])))
        except (OSError, KeyError, ValueError) as e:
            raise ValueError(f"learned guard model {path}: unreadable ({e})") from None


@lru_cache(maxsize=4)
def load_model(path: str = str(MODEL)) -> LearnedModel:
    """A model file, read once per path."""
    return LearnedModel.load(path)


# ------------------------------------------------------------------------------------------------
# training


def read_labelled(paths: Iterable[str | Path], text_column: str | None = None,
                  label_column: str | None = None) -> tuple[list[tuple[str, int]], list[str]]:
    """``(caption, 1 for a hack else 0)`` rows from JSONL files, and one line of reason per row that
    could not be read. A row's caption is ``text_column`` (default: ``caption``, else ``text``); its
    label is ``label_column`` (default: ``label``, "hack" or "honest"; else a boolean ``hack`` or
    ``is_hack``)."""
    rows, errors = [], []
    for path in paths:
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append(f"{where}: not JSON ({e.msg})")
                continue
            text = r.get(text_column) if text_column else r.get("caption", r.get("text"))
            label = _label(r, label_column)
            if not isinstance(text, str) or not text.strip():
                errors.append(f"{where}: no caption")
            elif label is None:
                errors.append(f"{where}: no label (hack/honest, or a boolean hack or is_hack)")
            else:
                rows.append((text, label))
    return rows, errors


def _label(row: dict[str, Any], column: str | None) -> int | None:
    value = row.get(column) if column else row.get("label", row.get("hack", row.get("is_hack")))
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.lower() in ("hack", "honest"):
        return int(value.lower() == "hack")
    if value in (0, 1):
        return int(value)
    return None


def digest(rows: list[tuple[str, int]]) -> str:
    """A fingerprint of a training set: whether a shipped model was trained on the corpora at hand."""
    h = hashlib.sha256()
    for text, label in rows:
        h.update(f"{label}\t{text}\n".encode())
    return h.hexdigest()[:16]


def train(rows: list[tuple[str, int]], c: float = 16.0, threshold: float = 0.8) -> LearnedModel:
    """Fit the model on ``(caption, label)`` rows (raw captions: each is normalised as the guard reads
    it). Needs scikit-learn (the ``train`` extra)."""
    try:
        from scipy.sparse import csr_matrix
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise ImportError("training the learned guard needs scikit-learn: pip install 'vlrl[train]'") from None
    labels = np.array([y for _, y in rows])
    if len(set(labels.tolist())) < 2:
        raise ValueError("training the learned guard needs both hacks and honest captions")
    indptr, indices = [0], []
    for text, _ in rows:
        indices += features(caption_text(Doc.of(text)))
        indptr.append(len(indices))
    counts = np.diff(indptr)
    values = np.repeat(1.0 / np.sqrt(np.maximum(counts, 1)), counts)
    x = csr_matrix((values, indices, indptr), shape=(len(rows), DIM))
    clf = LogisticRegression(C=c, max_iter=5000, class_weight="balanced").fit(x, labels)
    meta = {"dim": DIM, "c": c, "threshold": threshold, "hacks": int(labels.sum()),
            "honest": int(len(labels) - labels.sum()), "digest": digest(rows)}
    return LearnedModel(clf.coef_[0], float(clf.intercept_[0]), meta)


# ------------------------------------------------------------------------------------------------
# the guard


@register_guard("learned")
class LearnedGuard(Guard):
    """A caption the learned model scores as a hack with probability ``threshold`` or more (opt-in; see
    the module docstring). ``model``: a model file (default: the one shipped)."""

    default = False

    def __init__(self, penalty: float = 1.0, threshold: float | None = None, model: str | None = None) -> None:
        super().__init__(penalty)
        self.model = load_model(str(model or MODEL))
        self.threshold = float(threshold if threshold is not None else self.model.meta.get("threshold", 0.8))
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"learned guard: threshold must lie between 0 and 1, not {self.threshold}")

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        p = self.model.probability(caption_text(doc))
        if p >= self.threshold:
            yield "learned", f"learned model: hack with probability {p:.2f}"


__all__ = ["DIM", "MODEL", "LearnedGuard", "LearnedModel", "caption_text", "digest", "features", "load_model",
           "read_labelled", "train"]
