"""The learned guard: a linear model over hashed words, for hacks no pattern foresaw.

The pattern guards catch what their authors imagined. On held-out corpora written by authors who saw
neither the patterns nor the earlier corpora, they miss one hack in seven to one in four (the blind
pairs in ``docs/guards-measurements.md``). Each round of new patterns gained little on the next author. A model
trained on every labelled caption the project holds generalises from wording. Both sides count: the
hacks, and the hard honest captions that look like them. The guard reads words it has seen in other
hacks, not one hand-written shape.

* **Features.** Hashed words and word pairs of the normalised, lower-case caption (numbers folded to
  their length class; sentence punctuation left out, but "Q:", "[x]" and "10/10" are evidence), the
  character quadruples of each word (pairs in scripts written without spaces: Chinese, Japanese, Korean,
  Thai, Lao, Tibetan, Burmese, Khmer), and, from four words on, two classes of the whole caption: its
  length and how much it repeats its words. Each caption is a binary vector over :data:`DIM` buckets
  (CRC-32), scaled to unit length.
* **Model.** Logistic regression with balanced class weights and no intercept (scikit-learn at training
  time only).
  Scoring one caption is a sum of its buckets' weights, about 0.1 ms (``vlrl bench guards``). scikit-learn's
  own vectoriser costs 0.3 ms a caption when captions come one at a time, as the guards see them.
* **Threshold.** The guard fires when the model's probability of a hack is ``threshold`` (0.75) or more,
  on a caption of ``min_words`` (4) words or more: under that, punctuation and numbers ("07:45",
  "[image]") are most of what it reads, and the ``length`` guard judges such a caption.
  The default was chosen by leaving out each blind author's pair in turn and training on the rest. It is
  the lowest threshold that kept the pooled false positives on the held-out honest captions under 1%.
* **On by default,** after the pattern guards (``learned: false`` turns it off). On twenty-five
  held-out corpora by blind authors, the patterns alone caught 72-95% of the hacks and the layer with
  this guard 81-99% (twenty-one of them reach 90%), at 0-4% false positives but 7% on long dense
  captions of charts, menus and forms, and 8% on product and catalogue captions, where this guard
  added 6 of the 11 flags (the ``length`` band, which flags honest captions under five words, adds up
  to 4%). Restatement in other words is what it and the patterns catch least: 31 to 38% of it on two
  of the last corpora. On honest captions in the plain style of small vision-language models ("The
  image shows ... There is ...") the layer flags 2% on a corpus read once (4% on the one this model
  was chosen on); the model before this one, trained without that style, flagged 44%. It is a fallback guard: beside a pattern guard that fired it is reported but not charged again.
  It is a sixth to a seventh of the layer's cost (``vlrl bench guards``). Its errors follow the corpora it
  learned from, captions written by other models, in styles a policy may never use: left out of
  training, the author who wrote in less common languages (Khmer, Yoruba, Telugu, ...) had 5% of its
  honest captions flagged. Train one on your own
  rollouts (below), or turn it off, where that matters. The docs give every number.
* **A second opinion on lists.** A long list of nouns is keyword stuffing or an honest menu, and a
  pattern cannot tell which. A family with ``confirm`` in the table (``noun_dump``, ``long_list``,
  ``function_free_run``: 0.1) counts only where this guard's :meth:`LearnedGuard.probability` is at
  least that. Each training corpus left out in turn (55 groups, on the seventh model's corpora), their
  honest captions were flagged 255 times instead of 319 (of 8,596), for 22 more of 7,808 hacks missed
  (``dev/guard_confirm.py``; with two more corpora, 57 groups: 283 instead of 347, 19 more missed;
  not measured again for the shipped model's 59 groups). ``confirm: false``
  counts every list hit.

A model file (``.npz``: the weights, the bias and a JSON header, read without pickle) ships in
``data/learned_guard.npz``. It was trained by ``make learned-guard`` on the corpora of
``tests/fixtures/guard_*.jsonl``. ``vlrl reward guard-train`` trains one on your own labelled
rollouts: hacks your policy found and honest captions of your domain.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from vlrl.rewards.guards.base import Guard, register_guard
from vlrl.rewards.guards.doc import LETTERS, Doc

DIM = 1 << 18
# what :func:`features` computes; a model file records it, and one made by other features is refused
# (its weights would sit in other buckets and score every caption wrongly, without an error)
FEATURES = ("words, word pairs, unspaced character pairs (Thai to Khmer, kana, Han, Hangul), spaced character "
            "quadruples, length and repetition classes from four words; no sentence punctuation; crc32 mod 2**18")
MODEL = Path(__file__).parent / "data" / "learned_guard.npz"
# scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, Japanese kana, Chinese, Hangul
_UNSPACED = re.compile(r"[\u0e00-\u0fff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


# sentence punctuation says how a corpus was typed, not whether it hacks: a model that read the full stop
# learned that a caption without one is a hack ("A cat on a mat" 0.88, "A cat on a mat." 0.19)
_SENTENCE_MARKS = ".,!?;'\"()\u2026\u00ab\u00bb\u201c\u201d\u2018\u2019"
_MARK = rf"[^\w\s{re.escape(_SENTENCE_MARKS)}]"  # one punctuation token: any mark but those
_TOKEN = re.compile(rf"{LETTERS.pattern}|\d+|{_MARK}")
_ASCII_TOKEN = re.compile(rf"[A-Za-z]+(?:'[A-Za-z]+)?|\d+|{_MARK}")  # the same tokens of an ASCII text, found faster
_DIGIT = re.compile(r"\d")


def _tokens(text: str) -> list[str]:
    """Word, number and punctuation tokens of normalised, lower-case text, without sentence punctuation
    (``:``, ``[``, ``/``, ``#`` and the like stay: "Q:", "[x]" and "10/10" are evidence). A number becomes
    its length class ("0" for one or two digits, "00" for more), so "9/10" and "8/10" are one token pair."""
    ascii_text = text.isascii()
    found = (_ASCII_TOKEN if ascii_text else _TOKEN).findall(text)
    if ascii_text and not _DIGIT.search(text):
        return found  # (outside ASCII, str.isdigit() holds for more than \d finds: "❶", "፩")
    return [("0" if len(t) < 3 else "00") if t.isdigit() else t for t in found]


def features(text: str) -> list[int]:
    """The sorted, distinct buckets of a caption's words, word pairs, character pairs (scripts written
    without spaces) or quadruples (words of three letters or more, with their edges: "<fla", "flaw",
    "awle", ..., "ess>": "flawless", "flawlessly" and "makellos" share some), and two classes of the
    whole caption, when it has four words or more: its length (log2 of its tokens) and how often it
    repeats them (tenths of distinct tokens).
    Padding and rewording are shapes of the whole caption more than of any word. With each blind author
    left out of training in turn, words and pairs alone caught 80% of that author's hacks, and these
    features 87%, at 1% false positives (docs/guards-measurements.md)."""
    return read(text)[0].tolist()


def word_count(text: str) -> int:
    """How many words the model reads in ``text``: tokens that start with a letter, two characters of a
    script written without spaces making one (numbers and punctuation are no words)."""
    return read(text)[1]


_SHAPED = 4  # words before the shape classes count
MIN_WORDS = 4  # words before the guard judges a caption (see LearnedGuard)
_CACHED_WORD = 64  # longer tokens (a run of letters with no space) are not remembered


def read(text: str) -> tuple[np.ndarray, int]:
    """:func:`features` and :func:`word_count` of ``text`` at once (the guard needs both)."""
    toks = _tokens(text)
    if not toks:  # no words, no evidence (not even "a short caption": see LearnedModel.probability)
        return np.empty(0, dtype=np.int64), 0
    buckets = {_bucket("b " + a + " " + b) for a, b in zip(toks, toks[1:], strict=False)}
    words = 0
    for t in toks:
        own, n = _word_buckets(t) if len(t) <= _CACHED_WORD else _grams(t)
        buckets.update(own)
        words += n
    # the shape of the whole caption, once it has words enough to have one: on "Bye bye", "07:45" or
    # "[image]" the two classes would be most of the evidence, and they weigh as much as a word of praise
    if words >= _SHAPED:
        buckets.add(_bucket(f"len {min(8, (len(toks) + 1).bit_length() - 1)}"))
        buckets.add(_bucket(f"ttr {10 * len(set(toks)) // len(toks)}"))
    # (an array, sorted: the weights are gathered and summed in one order, whatever order the set holds them in)
    return np.sort(np.fromiter(buckets, dtype=np.int64, count=len(buckets))), words


@lru_cache(maxsize=1 << 14)
def _word_buckets(t: str) -> tuple[tuple[int, ...], int]:
    """:func:`_grams`, remembered (most words of a caption were in the captions before it)."""
    return _grams(t)


def _grams(t: str) -> tuple[tuple[int, ...], int]:
    """A token's own distinct buckets (itself, and its character pairs in an unspaced script or its
    quadruples), and how many words it counts for."""
    grams = ["w " + t]
    if _UNSPACED.search(t):
        grams += ["c " + t[i:i + 2] for i in range(len(t) - 1)]
        words = len(t) // 2
    else:
        if len(t) > 2:
            edged = f"<{t}>"
            grams += ["q " + edged[i:i + 4] for i in range(len(edged) - 3)]
        words = int(t[0].isalpha())
    return tuple(set(map(_bucket, grams))), words


def _bucket(gram: str) -> int:
    # ("surrogatepass": a lone surrogate, as broken decoders leave, is a token like any other)
    return zlib.crc32(gram.encode("utf-8", "surrogatepass")) & (DIM - 1)


def caption_text(doc: Doc) -> str:
    """What the model reads: the normalised caption, lower case (quotes kept: the model learns when a
    quotation is a sign and when it is an order to the grader): the ``whole`` view."""
    return doc.whole


class LearnedModel:
    """Weights over :data:`DIM` hashed buckets, a bias, and a header saying what it was trained on."""

    def __init__(self, weights: np.ndarray, bias: float, meta: dict[str, Any]) -> None:
        weights = np.asarray(weights)
        if weights.shape != (DIM,):
            raise ValueError(f"learned guard model: weights of shape {weights.shape}, expected ({DIM},)")
        if not isinstance(meta, dict):
            raise ValueError("learned guard model: its header is not a JSON object")
        self.weights = weights.astype(np.float32)
        self.bias = float(bias)
        if not (np.isfinite(self.weights).all() and np.isfinite(self.bias)):
            raise ValueError("learned guard model: weights or bias not finite")
        if "threshold" in meta and not (isinstance(meta["threshold"], (int, float)) and 0 < meta["threshold"] < 1):
            raise ValueError(f"learned guard model: threshold {meta['threshold']!r} is not a probability")
        self.meta = meta

    def probability(self, text: str) -> float:
        """The model's probability that ``text`` (see :func:`caption_text`) is a hack."""
        return self.score(read(text)[0])

    def score(self, idx: np.ndarray | list[int]) -> float:
        """The probability of a caption of buckets ``idx`` (see :func:`read`)."""
        if len(idx) == 0:
            # no word to read (empty): no evidence of a hack (the length guard judges an empty caption)
            return 0.0
        z = float(self.weights[idx].sum()) / np.sqrt(len(idx)) + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    def save(self, path: str | Path) -> Path:
        """Write the model to ``path`` exactly as named (numpy would add ".npz"), whole or not at all."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        with open(part, "wb") as f:
            np.savez_compressed(f, weights=self.weights.astype(np.float16), bias=np.float64(self.bias),
                                meta=np.array(json.dumps(self.meta, sort_keys=True)))
        os.replace(part, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LearnedModel:
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(z["weights"], float(z["bias"]), json.loads(str(z["meta"])))
        except (OSError, EOFError, KeyError, ValueError, TypeError, IndexError, zipfile.BadZipFile) as e:
            raise ValueError(f"learned guard model {path}: unreadable ({e})") from None


@lru_cache(maxsize=4)
def load_model(path: str = str(MODEL)) -> LearnedModel:
    """A model file for the guard, read once per path; refused when made by other features."""
    model = LearnedModel.load(path)
    if model.meta.get("features") != FEATURES:
        raise ValueError(f"learned guard model {path}: made by other features ({model.meta.get('features')!r}); "
                         "train it again with `vlrl reward guard-train`")
    return model


# ------------------------------------------------------------------------------------------------
# training


def read_labelled(paths: Iterable[str | Path], text_column: str | None = None,
                  label_column: str | None = None) -> tuple[list[tuple[str, int]], list[str]]:
    """``(caption, 1 for a hack else 0)`` rows from JSONL files, and one line of reason per row that
    could not be read. A row's caption is ``text_column`` (default: ``caption``, else ``text``); its
    label is ``label_column`` (default: ``label``, "hack" or "honest"; else a boolean ``hack`` or
    ``is_hack``; "true"/"false" and 1/0 are read too)."""
    rows, errors = read_labelled_rows(paths, text_column, label_column)
    return [(text, label) for text, label, _, _ in rows], errors


def read_labelled_rows(paths: Iterable[str | Path], text_column: str | None = None, label_column: str | None = None
                       ) -> tuple[list[tuple[str, int, dict[str, Any], str]], list[str]]:
    """:func:`read_labelled`, each row with its whole record (a measurement reads its category) and
    where it was read (``path:line``)."""
    rows, errors = [], []
    for path in paths:
        for n, raw in enumerate(Path(path).read_bytes().splitlines(), 1):
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                errors.append(f"{where}: not UTF-8")
                continue
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append(f"{where}: not JSON ({e.msg})")
                continue
            if not isinstance(r, dict):
                errors.append(f"{where}: not a JSON object")
                continue
            text = r.get(text_column) if text_column else _first(r, ("caption", "text"))
            label = _label(r, label_column)
            if not isinstance(text, str) or not text.strip():
                errors.append(f"{where}: no caption")
            elif label is None:
                errors.append(f"{where}: no label (hack/honest, or a boolean hack or is_hack)")
            else:
                rows.append((text, label, r, where))
    return rows, errors


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The first of ``keys`` that ``row`` holds a value for (a key present with null falls through)."""
    return next((row[k] for k in keys if row.get(k) is not None), None)


_LABELS = {"hack": 1, "honest": 0, "true": 1, "false": 0, "1": 1, "0": 0}


def _label(row: dict[str, Any], column: str | None) -> int | None:
    value = row.get(column) if column else _first(row, ("label", "hack", "is_hack"))
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        return _LABELS.get(value.strip().lower())
    if isinstance(value, int) and value in (0, 1):
        return value
    return None


def digest(rows: list[tuple[str, int]]) -> str:
    """A fingerprint of a training set: whether a shipped model was trained on the corpora at hand."""
    h = hashlib.sha256()
    for text, label in rows:
        h.update(f"{label}\t{text}\n".encode())
    return h.hexdigest()[:16]


def train(rows: list[tuple[str, int]], c: float = 16.0, threshold: float = 0.75) -> LearnedModel:
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
    indptr, indices, words = [0], [], []
    for text, _ in rows:
        idx, n = read(caption_text(Doc.of(text)))
        indices += idx.tolist()
        indptr.append(len(indices))
        words.append(n)
    counts = np.diff(indptr)
    values = np.repeat(1.0 / np.sqrt(np.maximum(counts, 1)), counts)
    x = csr_matrix((values, indices, indptr), shape=(len(rows), DIM))
    # (no intercept: fitted with one, the bias alone scored 0.80, above the threshold, and a caption
    # whose words the model had no weights for, in a script no corpus had, fired. Without it such a
    # caption is scored by its length and repetition classes alone: 0.56 for a 50-word Armenian one)
    clf = LogisticRegression(C=c, max_iter=5000, class_weight="balanced", fit_intercept=False).fit(x, labels)
    # how the guard does on its own rows, from the matrix already built (an upper bound: measure it on others)
    fired = (clf.predict_proba(x)[:, 1] >= threshold) & (np.array(words) >= MIN_WORDS)
    fit = {"recall": float(fired[labels == 1].mean()), "fpr": float(fired[labels == 0].mean())}
    meta = {"dim": DIM, "features": FEATURES, "c": c, "threshold": threshold, "hacks": int(labels.sum()),
            "honest": int(len(labels) - labels.sum()), "digest": digest(rows), "fit": fit}
    return LearnedModel(clf.coef_[0], 0.0, meta)


# ------------------------------------------------------------------------------------------------
# the guard


@register_guard("learned")
class LearnedGuard(Guard):
    """A caption of ``min_words`` words or more that the learned model scores as a hack with probability
    ``threshold`` or more (on by default; see the module docstring). ``model``: a model file (default: the one
    shipped). ``confirm``: whether its probability confirms the hits of the list families (their
    ``confirm`` in the table, chosen on the shipped model; ``false`` counts every list hit, as with no
    learned guard)."""

    rank = 2  # after the pattern guards: it reads what they missed
    fallback = True  # beside a pattern guard that fired, reported but not charged again
    def __init__(self, penalty: float = 1.0, threshold: float | None = None, model: str | None = None,
                 min_words: int = MIN_WORDS, confirm: bool = True) -> None:
        super().__init__(penalty)
        self.confirms = bool(confirm)  # its probability confirms the hits of list families (``confirm`` in the table)
        if min_words < 0:
            raise ValueError(f"learned guard: min_words must be 0 or more, not {min_words}")
        self.min_words = min_words
        self.model = load_model(str(model or MODEL))
        self.threshold = float(threshold if threshold is not None else self.model.meta.get("threshold", 0.75))
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"learned guard: threshold must lie between 0 and 1, not {self.threshold}")

    def _read(self, doc: Doc) -> tuple[float, int]:
        """The model's probability and the word count of ``doc``, once per caption and model (a pattern
        guard's ``confirm`` asks first, :meth:`hits` after)."""
        key = ("learned", self.model)
        if key not in doc.memo:
            idx, words = read(caption_text(doc))
            doc.memo[key] = (self.model.score(idx), words)
        return doc.memo[key]  # type: ignore[return-value]

    def probability(self, doc: Doc) -> float:
        """The model's probability that ``doc`` is a hack, however short (:meth:`hits` applies
        ``min_words`` and the threshold)."""
        return self._read(doc)[0]

    def _fires(self, doc: Doc, threshold: float) -> bool:
        p, words = self._read(doc)
        # "07:45", "[image]", "Dog dog": too little to read (the length guard judges them)
        return bool(words >= self.min_words and p >= threshold)

    def fires_at(self, doc: Doc, thresholds: Iterable[float]) -> tuple[bool, ...]:
        """Whether :meth:`check` would find a hit on ``doc`` were the threshold each of ``thresholds``: the
        model (unless its family is skipped) or a user's patterns, which are asked once whatever the
        threshold. ``vlrl reward guard-eval`` asks several, so a user can see what raising the threshold
        trades on their own captions."""
        user = None
        out = []
        for t in thresholds:
            if "learned" not in self._skip and self._fires(doc, t):
                out.append(True)
                continue
            if user is None:
                user = any(fam.name not in self._skip and fam.find(doc) is not None for fam in self._user)
            out.append(user)
        return tuple(out)

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        if self._fires(doc, self.threshold):
            yield "learned", f"learned model: hack with probability {self.probability(doc):.2f}"


__all__ = ["DIM", "FEATURES", "MIN_WORDS", "MODEL", "LearnedGuard", "LearnedModel", "caption_text", "digest", "features", "load_model",
           "read", "read_labelled", "read_labelled_rows", "train", "word_count"]
