"""Literal prefilters: skip a regular expression that cannot match, with one scan of the text.

The cheap layer runs on every rollout, and most of a caption's text holds no hack: running every
family's regular expressions over every sentence of an honest 80-word caption costs milliseconds.
A *gate* says which literals a match must contain: a conjunction of clauses, each clause a set of
literals one of which every match holds (``{{self}}.*?{{praise}}`` needs a self word *and* a praise
word). The gates are read off the parsed pattern, so they are exact, never a guess: a literal run is
required where it is not optional; an alternation requires one of its branches' literals; a
lookaround, a character class or an optional part requires nothing, except a class of a few single
characters inside a literal run, which spells the run out ("aten[cç]ão": "atencão" or "atenção"). A
pattern whose gate fails on a text cannot match anywhere in it (nor in any unit of it: a unit's match
is a substring of the text), so skipping it changes no verdict.

Which literals a text holds is found once per text (:func:`present`) by one Aho-Corasick automaton
over every literal the gates name.

:func:`disabled` switches every prefilter off (the reference path the equivalence test compares
against: the same engine with no skip).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

try:  # the regex parser the gates read (renamed in Python 3.11)
    from re import _constants as sre_c
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

MIN_LITERAL = 2
"""Shortest literal a clause may hold (one letter is in every text); a lone non-ASCII character is kept."""
MAX_CLAUSES = 4
"""Clauses kept per pattern: the most selective ones."""
RARE_MARKS = frozenset("[]{}<>|#=*~^+%@$&\\/")
"""ASCII marks rare enough in captions that one alone is a gate ("[inst]", "<|system|>", "{...}")."""

Clause = frozenset[str]
Gate = tuple[Clause, ...]

ENABLED = True


_CACHES: list[Any] = []


def remembered(fn: Any) -> Any:
    """Mark an ``lru_cache``d function whose results were computed through gates: :func:`disabled`
    empties it, so the reference path recomputes everything itself."""
    _CACHES.append(fn)
    return fn


@contextmanager
def disabled() -> Iterator[None]:
    """Every prefilter off inside the block: every regular expression runs (the reference path)."""
    global ENABLED
    was, ENABLED = ENABLED, False
    for fn in _CACHES:
        fn.cache_clear()
    try:
        yield
    finally:
        ENABLED = was
        for fn in _CACHES:
            fn.cache_clear()


# ------------------------------------------------------------------------------------------------
# Reading the gate off a parsed pattern


LEFT, RIGHT = "\x01", "\x02"
"""Marks on a literal that the pattern puts at a word boundary (``\\bmark\\b`` is not in "market")."""


def bare(literal: str) -> str:
    return literal.strip(LEFT + RIGHT)


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _usable(clause: Iterable[str]) -> bool:
    """Whether a clause is worth testing: no literal in it is in almost every caption ("th", "in")."""
    clause = list(clause)
    return bool(clause) and all(_rare(x) for x in clause)


def _rare(literal: str) -> bool:
    word = bare(literal)
    if not word.isascii():
        return True
    if len(word) < MIN_LITERAL:
        return word in RARE_MARKS
    # a two-letter run counts only as a whole word ("ai", "my")
    if word.isalpha() and len(word) == 2:
        return literal.startswith(LEFT) and literal.endswith(RIGHT)
    return True


_CHANCE = {1: 0.3, 2: 0.5, 3: 0.25, 4: 0.1, 5: 0.05, 6: 0.03}


@lru_cache(maxsize=1)
def _common() -> frozenset[str]:
    """English function words ("with", "the", "this"): in nearly every caption, so a poor gate. Read
    from the guards' own list (``data/english_function_words.txt``)."""
    path = Path(__file__).parent / "data" / "english_function_words.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


def _chance(literal: str) -> float:
    """A rough chance that a caption holds ``literal``: short letter runs and function words are
    everywhere (only which clauses a gate keeps depends on it, never what a gate lets through)."""
    if bare(literal).strip() in _common():
        return 0.9
    word = bare(literal).strip()
    p = _CHANCE.get(len(word), 0.01)
    p = p if word.isalpha() else p / 4
    return p / (1 + literal.startswith(LEFT) + literal.endswith(RIGHT))


def _rank(clause: Clause) -> float:
    # the most selective first: the least likely to be met by an honest caption (only speed depends on it)
    miss = 1.0
    for x in clause:
        miss *= 1.0 - _chance(x)
    return 1.0 - miss


def _best(clauses: Iterable[Clause], n: int) -> list[Clause]:
    """The ``n`` most selective clauses, each sharing at most half its literals with one kept before
    (variants of one clause test the same words; a clause of other words adds a real condition)."""
    kept: list[Clause] = []
    for c in sorted(set(clauses), key=_rank):
        if all(len(c & k) * 2 <= min(len(c), len(k)) for k in kept):
            kept.append(c)
            if len(kept) == n:
                break
    return kept


_NONWORD = (sre_c.CATEGORY_SPACE, sre_c.CATEGORY_NOT_WORD, sre_c.CATEGORY_UNI_SPACE, sre_c.CATEGORY_UNI_NOT_WORD)


def _boundary(item: Any) -> bool:
    """Whether ``item`` puts a word boundary next to a word character beside it: ``\\b``, or a
    required run of spaces (``\\s+``)."""
    op, av = item
    if op is sre_c.AT:
        return av is sre_c.AT_BOUNDARY
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and av[0] >= 1 and len(av[2]) == 1:
        op, av = list(av[2])[0]
    return op is sre_c.IN and len(av) == 1 and av[0][0] is sre_c.CATEGORY and av[0][1] in _NONWORD


SMALL_CLASS = 3
"""A character class of at most this many single characters ("[cç]", "[aá]") spells a letter's variants:
it continues a literal run, each of its characters giving one spelling of the run."""
_MAX_SPELLINGS = 16


def _chars(item: Any) -> set[str] | None:
    """The characters a literal, or a small class of single characters, stands for; else ``None``."""
    op, av = item
    if op is sre_c.LITERAL:
        return {chr(av)}
    if op is sre_c.IN and 0 < len(av) <= SMALL_CLASS and all(o is sre_c.LITERAL for o, _ in av):
        return {chr(v) for _, v in av}
    return None


def _seq(items: list[Any], ci: bool, lb: bool = False, rb: bool = False) -> list[Clause]:
    """Clauses of a sequence; ``lb``/``rb``: a word boundary stands just before/after it."""
    clauses: list[Clause] = []
    runs: set[str] = set()  # the spellings of the literal run so far ("aten[cç]": "atenc", "atenç")
    run_lb = False
    n = len(items)
    for i, (op, av) in enumerate(items):
        left = (i == 0 and lb) or (i > 0 and _boundary(items[i - 1]))
        right = (i == n - 1 and rb) or (i < n - 1 and _boundary(items[i + 1]))
        chars = _chars((op, av))
        if chars is not None:
            if runs and len(runs) * len(chars) > _MAX_SPELLINGS:
                # too many spellings: the run so far is one clause (no boundary after it), a new run starts
                clauses.append(frozenset((LEFT if run_lb and _word(r[0]) else "") + r for r in runs))
                runs = set()
            if not runs:
                runs, run_lb = {""}, left
            runs = {r + c for r in runs for c in chars}
            if i == n - 1 or _chars(items[i + 1]) is None:
                spelt = {(LEFT if run_lb and _word(r[0]) else "") + r + (RIGHT if right and _word(r[-1]) else "")
                         for r in runs}
                clauses.append(frozenset(spelt))
                if i < n - 1 and items[i + 1][0] is sre_c.BRANCH and (heads := _heads(items[i + 1][1][1])) \
                        and len(runs) * len(heads) <= _MAX_SPELLINGS:
                    # the parser factors "this|that" into "th" + (is|at): put the words back together
                    clauses.append(frozenset((LEFT if run_lb and _word(r[0]) else "") + r + h
                                             for r in runs for h in heads))
                runs = set()
            continue
        clauses.extend(_node(op, av, ci, left, right))
    if ci:
        clauses = [frozenset(x.lower() for x in c) for c in clauses if all(x.isascii() for x in c)]
    return _best((c for c in clauses if _usable(c)), MAX_CLAUSES)


def _heads(alternatives: list[Any]) -> set[str] | None:
    """The literal run each alternative starts with, or ``None`` if one starts otherwise."""
    heads = set()
    for alt in alternatives:
        head = ""
        for op, av in alt:
            if op is not sre_c.LITERAL:
                break
            head += chr(av)
        if not head:
            return None
        heads.add(head)
    return heads


def _node(op: Any, av: Any, ci: bool, lb: bool = False, rb: bool = False) -> list[Clause]:
    if op is sre_c.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        if del_flags & re.IGNORECASE and ci:
            return []  # a case-sensitive island in a case-blind pattern: keep it simple
        if add_flags & (re.ASCII | re.LOCALE):
            return []  # another meaning of a word boundary inside the group (the marks assume Unicode's)
        return _seq(list(sub), ci or bool(add_flags & re.IGNORECASE), lb, rb)
    if op is sre_c.BRANCH:
        # (A1 and A2) or (B1 and B2) = (A1 or B1) and (A1 or B2) and (A2 or B1) and (A2 or B2): every
        # choice of one clause per alternative, the best few kept at each step
        acc: list[Clause] = [frozenset()]
        for alt in av[1]:
            got = _seq(list(alt), ci, lb, rb)
            if not got:
                return []
            acc = _best((a | c for a in acc for c in got), MAX_CLAUSES)
        return acc
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and av[0] >= 1:
        return _seq(list(av[2]), ci)
    if op is sre_c.IN and av and all(o is sre_c.LITERAL for o, _ in av):
        chars = {chr(v) for _, v in av}
        return [frozenset(chars)] if all(not c.isascii() or c in RARE_MARKS for c in chars) and not ci else []
    return []


@lru_cache(maxsize=4096)
def cnf(pattern: str, flags: int = 0) -> tuple[Gate, bool] | None:
    """The gate of one pattern: ``(clauses, case_blind)``, or ``None`` when it requires no literal.

    A case-blind gate (the pattern, or the part its literals come from, is ``(?i:...)``) holds lower
    case literals, read against the lower-cased text; it applies to ASCII text only (Unicode case
    folding matches "ı" to "i")."""
    parsed = sre_parse.parse(pattern, flags)
    ci = bool(parsed.state.flags & re.IGNORECASE)
    clauses = _seq(list(parsed), ci)
    if not clauses:
        return None
    if parsed.state.flags & (re.ASCII | re.LOCALE):  # another meaning of a word boundary: marks off
        clauses = [frozenset(bare(x) for x in c) for c in clauses]
    blind = ci or _has_ci(list(parsed))
    if blind:  # a pattern mixing case-blind and case-kept literals: all read lower-cased
        clauses = _best((frozenset(x.lower() for x in c) for c in clauses), MAX_CLAUSES)
    return tuple(clauses), blind


def _has_ci(items: list[Any]) -> bool:
    for op, av in items:
        if op is sre_c.SUBPATTERN and av[1] & re.IGNORECASE:
            return True
        if op is sre_c.SUBPATTERN and _has_ci(list(av[3])):
            return True
        if op is sre_c.BRANCH and any(_has_ci(list(a)) for a in av[1]):
            return True
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and _has_ci(list(av[2])):
            return True
    return False


# ------------------------------------------------------------------------------------------------
# Which literals a text holds


class _Index:
    """Every literal any gate names, and how :func:`present` finds them in a text.

    One Aho-Corasick automaton (``pyahocorasick``) over the bare literals reports every occurrence of
    every literal in one pass over the text, in C; a literal marked to start a word is kept only
    where no word character precedes it, a whole word (marked on both sides, word characters only)
    only where none follows it either. A literal marked only at its end is not checked there:
    finding more than is there only runs a pattern for nothing. (A regex trie did this before, at
    three to four times the cost on an 80-word caption.)

    Gates may be registered while other threads check captions (a guard built lazily, a user's
    patterns): ``add`` replaces the set rather than growing it, and one lock orders adding and building,
    so no build reads a set that changes under it."""

    def __init__(self) -> None:
        self.marked: frozenset[str] = frozenset()
        self._built: Any = None
        self._lock = threading.Lock()

    @property
    def literals(self) -> set[str]:
        return {bare(x) for x in self.marked}

    def add(self, literals: Iterable[str]) -> None:
        with self._lock:
            new = set(literals) - self.marked
            if new:
                # the automaton is dropped before the set grows: a reader that sees the new size (the
                # key of :func:`_present`'s cache) then sees no automaton older than it
                self._built = None
                self.marked = self.marked | new
                _present.cache_clear()

    def build(self) -> Any:
        built = self._built
        if built is not None:
            return built
        with self._lock:
            if self._built is None:
                self._built = self._automaton()
            return self._built

    def _automaton(self) -> Any:
        import ahocorasick

        forms: dict[str, list[str]] = {}
        for x in self.marked:
            forms.setdefault(bare(x), []).append(x)
        automaton = ahocorasick.Automaton()
        for w, marked in forms.items():
            whole = all(_word(c) for c in w)
            free = frozenset(x for x in marked if not x.startswith(LEFT))  # found wherever ``w`` is
            at_start = frozenset(x for x in marked if x.startswith(LEFT) and not (whole and x.endswith(RIGHT)))
            words = frozenset(x for x in marked if x.startswith(LEFT) and whole and x.endswith(RIGHT))
            automaton.add_word(w, (len(w), free, at_start, words))
        automaton.make_automaton()
        return automaton


INDEX = _Index()


@lru_cache(maxsize=256)
def _present(text: str, size: int) -> frozenset[str]:
    found: set[str] = set()
    last = len(text) - 1
    # (the hot loop of the layer: one pass per hit of any literal, so ``_word`` is written out)
    for end, (length, free, at_start, words) in INDEX.build().iter(text):
        if free:
            found |= free
        if at_start or words:
            start = end - length + 1
            if start == 0 or not ((c := text[start - 1]).isalnum() or c == "_"):
                found |= at_start
                if words and (end == last or not ((c := text[end + 1]).isalnum() or c == "_")):
                    found |= words
    return frozenset(found)


_LAST: list[tuple[Any, int, frozenset[str]]] = [(None, -1, frozenset())]


def present(text: str) -> frozenset[str]:
    """The literals of every registered gate that occur in ``text`` (with their boundary marks),
    and possibly some more (never fewer)."""
    size = len(INDEX.marked)
    last, known, found = _LAST[0]  # (one tuple: a thread never reads one text's literals for another's)
    if last is text and known == size:  # the same text asked again (family after family)
        return found
    found = _present(text, size)
    _LAST[0] = (text, size, found)
    return found


@lru_cache(maxsize=64)
def _lower(text: str) -> str:
    return text.lower()


def register(gates: Iterable[tuple[Gate, bool] | None]) -> None:
    """Make the literals of ``gates`` findable by :func:`present`."""
    INDEX.add(x for g in gates if g is not None for clause in g[0] for x in clause)


def live(gs: list[tuple[Gate, bool] | None], text: str) -> tuple[int, ...]:
    """The indices of ``gs`` whose gate ``text`` passes (every index with prefilters off)."""
    if not ENABLED:
        return tuple(range(len(gs)))
    found: frozenset[str] | None = None
    lower: frozenset[str] | None = None
    out = []
    for i, g in enumerate(gs):
        if g is None:
            out.append(i)
            continue
        clauses, blind = g
        if blind:
            if not text.isascii():
                out.append(i)
                continue
            if lower is None:
                lower = present(_lower(text))
            have = lower
        else:
            if found is None:
                found = present(text)
            have = found
        for c in clauses:
            if have.isdisjoint(c):
                break
        else:
            out.append(i)
    return tuple(out)


def passes(g: tuple[Gate, bool] | None, text: str) -> bool:
    """Whether ``text`` holds what a match of the gated pattern needs (always, with no gate or with
    prefilters off)."""
    if g is None or not ENABLED:
        return True
    clauses, blind = g
    if blind:
        if not text.isascii():
            return True
        text = _lower(text)
    found = present(text)
    for c in clauses:  # noqa: SIM110 (a loop, not all() over a generator: called tens of times a caption)
        if found.isdisjoint(c):
            return False
    return True


def _lower_case_only(pattern: str, flags: int = 0) -> bool:
    """Whether a case-blind ``pattern`` finds the same spans case-sensitively in ASCII text lower-cased.
    Read off the parsed pattern: every literal is an ASCII character that lower-casing leaves as it is,
    no range of a class reaches a capital letter or past ASCII, and no part turns case-blindness off."""
    try:
        return _lowered_items(list(sre_parse.parse(pattern, flags)))
    except (re.error, RecursionError):
        return False


_REPEATS = tuple(getattr(sre_c, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(sre_c, n))
_ATOMIC = getattr(sre_c, "ATOMIC_GROUP", None)  # (Python 3.11 on)


def _kept(code: int) -> bool:
    """An ASCII character that lower-casing leaves as it is (no capital, 65 to 90)."""
    return code < 128 and not 65 <= code <= 90


def _lowered_items(items: list[Any]) -> bool:
    for op, av in items:
        ok, parts = True, ()
        if op in (sre_c.LITERAL, sre_c.NOT_LITERAL):
            ok = _kept(av)
        elif op is sre_c.IN:
            # (a range is kept when it stays in ASCII and off the capitals, 65 to 90)
            ok = all(_kept(a) if o is sre_c.LITERAL else not (o is sre_c.RANGE and (a[1] > 127 or (a[0] <= 90 and a[1] >= 65)))
                     for o, a in av)
        elif op is sre_c.SUBPATTERN:
            ok, parts = not av[2] & re.IGNORECASE, (av[3],)
        elif op is sre_c.BRANCH:
            parts = av[1]
        elif op in _REPEATS:
            parts = (av[2],)
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            parts = (av[1],)
        elif op is _ATOMIC:
            parts = (av,)
        elif op is sre_c.GROUPREF_EXISTS:
            parts = tuple(b for b in av[1:] if b is not None)
        if not ok or not all(_lowered_items(list(p)) for p in parts):
            return False
    return True


def _keeping(repl: Any) -> Any:
    """``repl`` for :func:`re.sub`, where its ``None`` keeps the match as written."""
    return lambda m: r if (r := repl(m)) is not None else m.group(0)


class Gated:
    """A compiled pattern with its gate: ``search``/``sub``/``finditer`` skip the regex engine when
    the text cannot hold a match (the result is what the bare pattern gives).

    ``sub`` of a case-blind pattern that reads lower case only (:func:`_lower_case_only`) runs on ASCII
    text lower-cased, case-sensitively, and copies the text between matches as written: the same spans,
    in about a third of the time (Python's case-blind matching compares case by case at every position)."""

    def __init__(self, pattern: str | re.Pattern[str], flags: int = 0) -> None:
        self.re = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        self.gate = cnf(self.re.pattern, self.re.flags & (re.IGNORECASE | re.ASCII))
        register([self.gate])
        self.pattern = self.re.pattern
        self._lowered = (re.compile(self.pattern, self.re.flags & ~re.IGNORECASE)
                         if self.re.flags & re.IGNORECASE and _lower_case_only(self.pattern, self.re.flags) else None)

    def possible(self, text: str) -> bool:
        return passes(self.gate, text)

    def search(self, text: str, *args: Any) -> re.Match[str] | None:
        return self.re.search(text, *args) if passes(self.gate, text) else None

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.re.finditer(text) if passes(self.gate, text) else iter(())

    def sub(self, repl: Any, text: str) -> str:
        """:func:`re.sub`, where a callable ``repl`` may return ``None`` to keep the match as written
        (it may be handed the match on the text lower-cased; a string ``repl`` with no backslash is
        inserted as it is)."""
        if not passes(self.gate, text):
            return text
        call = callable(repl)
        if self._lowered is None or not ENABLED or not (call or "\\" not in repl) or not text.isascii():
            return self.re.sub(_keeping(repl) if call else repl, text)
        out, last = [], 0
        for m in self._lowered.finditer(text.lower()):
            r = repl(m) if call else repl
            out += (text[last:m.start()], text[m.start():m.end()] if r is None else r)
            last = m.end()
        return "".join((*out, text[last:])) if out else text




def first_literals(gs: Iterable[tuple[Gate, bool] | None]) -> frozenset[str] | None:
    """The literals of the first clause of every gate in ``gs``: a text (of any case) that holds
    none of them passes none of the gates. ``None`` when a pattern has no gate or a case-blind one
    (then each gate is asked in turn)."""
    out: set[str] = set()
    for g in gs:
        if g is None or g[1]:
            return None
        out |= g[0][0]
    return frozenset(out)


_GLOBAL_FLAGS = re.compile(r"(?:\(\?[aiLmsux]+\))+")


def group(pattern: str) -> str:
    """``pattern`` as one group, to be joined with others into an alternation: ``(?:pattern)``, or, for a
    pattern that opens with flags for the whole of it (``(?i)...``, which Python accepts only at the
    start of an expression), the same flags scoped to the group (``(?i:...)``): the same matches."""
    m = _GLOBAL_FLAGS.match(pattern)
    if m is None:
        return f"(?:{pattern})"
    flags = "".join(dict.fromkeys(c for c in m.group(0) if c.isalpha()))
    return f"(?{flags}:{pattern[m.end():]})"


def _marks(pattern: str) -> Iterator[tuple[int, str, int]]:
    """``(index, mark, depth)`` of each ``(``, ``)`` and ``|`` of ``pattern`` outside escapes and character
    classes; the depth of a parenthesis is that of the group it opens or closes (1 at the top level)."""
    depth, i, n = 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class: "]" first (after an optional "^") is a member, and escapes skip a character
            i += 1 + (pattern[i + 1 : i + 2] == "^")
            i += pattern[i : i + 1] == "]"
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
            yield i, c, depth
        elif c == ")":
            yield i, c, depth
            depth -= 1
        elif c == "|":
            yield i, c, depth
        i += 1


def _one_group(piece: str) -> str | None:
    """The inside of ``piece`` when it is one non-capturing group ``(?:...)`` and nothing else."""
    if not piece.startswith("(?:"):
        return None
    close = next(i for i, c, d in _marks(piece) if c == ")" and d == 1)
    return piece[3:-1] if close == len(piece) - 1 else None


def alternatives(pattern: str) -> list[str]:
    """The alternatives of ``pattern``'s top-level alternation, nested non-capturing groups that make up a
    whole alternative opened up (``(?:a|b)|c`` gives ``a``, ``b``, ``c``): tried in this order as one
    alternation, they match what ``pattern`` matches. ``[pattern]`` where cutting could change a match:
    capturing groups (their numbers would move), inline flags, comments."""
    if "(?#" in pattern or re.search(r"\(\?[aiLmsux]", pattern) or re.compile(pattern).groups:
        return [pattern]
    cuts = [i for i, c, depth in _marks(pattern) if c == "|" and depth == 0]
    out: list[str] = []
    for lo, hi in zip([-1, *cuts], [*cuts, len(pattern)], strict=True):
        piece = pattern[lo + 1 : hi]
        inner = _one_group(piece)
        out += alternatives(inner) if inner is not None else [piece]
    return out


class Alternation:
    """Patterns tried as one alternation (``(?:p1)|(?:p2)|...``, so the leftmost match wins and, at one
    position, the first pattern in order), run with only the patterns whose gate a text passes: a
    pattern that cannot match anywhere in the text changes no match of the alternation."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = list(patterns)
        self.whole = re.compile("|".join(map(group, self.patterns))) if self.patterns else None
        self.gates: list[tuple[Gate, bool] | None] = [cnf(p) for p in self.patterns]
        register(self.gates)
        self._subsets: dict[tuple[int, ...], re.Pattern[str] | None] = {}
        self.first = first_literals(self.gates)
        """Every literal of each gate's first clause: a text holding none of them runs no pattern."""

    def runnable(self, text: str) -> re.Pattern[str] | None:
        """The alternation of the patterns that can match in ``text``, or ``None`` if none can."""
        if self.whole is None or not ENABLED:
            return self.whole
        if self.first is not None and present(text).isdisjoint(self.first):
            return None
        keep = live(self.gates, text)
        if len(keep) == len(self.patterns):
            return self.whole
        pattern = self._subsets.get(keep, self)  # (a local: another thread may clear the dict meanwhile)
        if pattern is self:
            pattern = re.compile("|".join(group(self.patterns[i]) for i in keep)) if keep else None
            if len(self._subsets) > 512:
                self._subsets.clear()
            self._subsets[keep] = pattern
        return pattern

    def possible(self, text: str) -> bool:
        """Whether some pattern can match in ``text`` (by the gates, without compiling their alternation)."""
        if self.whole is None or not ENABLED:
            return self.whole is not None
        if self.first is not None and present(text).isdisjoint(self.first):
            return False
        return bool(live(self.gates, text))

    def search(self, text: str) -> re.Match[str] | None:
        pattern = self.runnable(text)
        return pattern.search(text) if pattern is not None else None


__all__ = ["Alternation", "Gated", "alternatives", "cnf", "disabled", "first_literals", "group", "live", "passes",
           "present", "register", "remembered"]
