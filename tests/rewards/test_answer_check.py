"""The shared boxed-answer reader and timeout-safe math_verify check (vlrl.rewards.answer_check),
used by both Prism's reasoning mode and Vision-R1's reward."""

from __future__ import annotations

import threading
import time

import pytest

from vlrl.methods.caprl import prism
from vlrl.methods.vision_r1 import reward as hfrrf
from vlrl.rewards.answer_check import (
    DEFAULT_TIMEOUT_S,
    CheckPool,
    check_pool,
    last_boxed,
    math_equal,
    math_number,
    too_big,
)


def test_one_reader_for_boxed_answers():
    text = r"so \boxed{ \frac{1}{2} } and finally \fbox{0.75}"
    assert last_boxed(text) == "0.75" and prism.boxed_answer(text) == "0.75"
    assert hfrrf.extract_answer(text) == "0.75"
    assert last_boxed(r"\boxed{a{b}c}") == "a{b}c" and last_boxed(r"\boxed{open") is None


def test_prism_and_hfrrf_agree_on_equivalence():
    for pred, gold, ok in [(r"\frac{3}{4}", "0.75", True), ("0.7", "0.75", False), (r"2\sqrt{2}", r"\sqrt{8}", True)]:
        assert prism.verified(pred, [gold]) is ok and math_equal(pred, gold) is ok
        assert hfrrf.math_equal is math_equal
    assert math_number(r"\frac{25}{2}") == 12.5 and math_number("a cat") is None


def test_prism_checks_are_bounded_off_the_main_thread():
    out = []
    t = threading.Thread(target=lambda: out.append((prism.verified("9^{9^{9^{9}}}", ["3"]),
                                                     math_number("9^{9^{9^{9}}}", timeout=3))), daemon=True)
    t.start()
    t.join(180)
    assert not t.is_alive() and out and out[0][0] is False


# A check sympy cannot finish in minutes (expanding degree-6000 polynomials), with no big number in it.
SLOW = "(x+1)^{3000}(x-1)^{3000}"
HUGE = ["10^10^10", "10^{10^{10}}", "1e999999999", "2^{100000000}", "9^{9^{9^{9}}}", "100000000!"]


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the check hung"
    return out[0]


def test_huge_numbers_are_refused_before_any_arithmetic():
    for text in HUGE:
        assert too_big(text), text
        assert math_equal(text, "3") is False  # main thread: refused, never computed
        assert _in_thread(lambda t=text: math_equal(t, "3")) is False  # off it too, before any worker
    for text in ["2^{10}", "e^{-x^2}", "10^{400}", "1e400", "x^{2}+1", r"\frac{1}{2}", "12!"]:
        assert too_big(text) is None, text
    assert math_equal("2^{10}", "1024") is True


def test_floats_beyond_range_are_not_equal_numbers():
    assert hfrrf.to_number("1e400") is None and hfrrf.to_number("1e-400") is None
    assert hfrrf.to_number("1e999999999") is None and hfrrf.to_number("1.5e3") == (1500.0, False)
    assert hfrrf.check_answer("1e400", "1e500") is False  # both overflow a float: inf == inf is no match
    assert hfrrf.check_answer("1e-400", "1e-500") is False and hfrrf.check_answer("1e400", "1e400") is True
    r = hfrrf.HFRRFReward()
    done = ["<think>a</think><answer>1e400</answer>", "<think>a</think><answer>1e10000000</answer>",
            "<think>a</think><answer>1e999999999</answer>"]
    assert r(completions=done, answer=["12", "12", "12"]) == [0.0, 0.0, 0.0]  # scored, not None


def test_queue_time_does_not_count_and_a_timeout_kills_only_its_worker():
    pool = CheckPool(size=1)
    try:
        assert pool.run("equal", ("x^2+1", "1+x^2"), 30) is True  # worker started (start-up is not charged)
        results: dict[int, object] = {}

        def check(i, pred, gold):
            try:
                results[i] = pool.run("equal", (pred, gold), 3)
            except TimeoutError:
                results[i] = "timeout"

        slow = threading.Thread(target=check, args=(-1, SLOW, "(x^2-1)^2"))
        slow.start()
        while pool.busy == 0:  # the slow check holds the only worker; the others queue behind it
            slow.join(0.01)
        fast = [threading.Thread(target=check, args=(k, f"(x+{k})(x-{k})", f"x^2-{k * k}")) for k in range(1, 7)]
        for t in fast:
            t.start()
        for t in [slow, *fast]:
            t.join(120)
        # each fast check waited at least the slow one's 3 s limit in the queue, yet got its verdict
        assert results == {-1: "timeout", **{k: True for k in range(1, 7)}}
        assert pool.killed == 1
    finally:
        pool.close()


@pytest.mark.slow
def test_verl_compute_score_grades_all_correct_answers_among_pathological_ones_on_64_threads():
    """The audit's case: 128 correct symbolic answers, each equal only to a real checker, interleaved
    with 4 pathological ones, through the verl adapter on 64 threads."""
    from concurrent.futures import ThreadPoolExecutor

    from vlrl.training.verl import compute_score

    forms = [("(x+{k})^2 (x-{k})^2", "(x^2-{kk})^2"), ("(x+{k})(x-{k})", "x^2-{kk}"), ("{k}x^2+{k}x", "{k}x(x+1)"),
             (r"\frac{{x^2-{kk}}}{{x+{k}}}", "x-{k}")]
    correct = []
    for k in range(1, 33):
        for pred, gold in forms:
            correct.append((pred.format(k=k, kk=k * k), gold.format(k=k, kk=k * k)))
    bad = [(SLOW, "(x^2-1)^2"), ("10^{10^{10}}", "3"), (SLOW, "(x^2-1)^2"), ("1e999999999", "3")]
    batch = list(correct)
    for j, b in enumerate(bad):  # interleaved, not at the end
        batch.insert(20 + 30 * j, b)

    def score(pair):
        pred, gold = pair
        return compute_score("math", f"<think>work</think><answer>{pred}</answer>", gold, {}, reward="hfrrf")["score"]

    pool = check_pool()
    with ThreadPoolExecutor(64) as ex:
        t0 = time.monotonic()
        baseline = list(ex.map(score, correct))
        t_base = time.monotonic() - t0
        t0 = time.monotonic()
        mixed = list(ex.map(score, batch))
        t_mixed = time.monotonic() - t0
    assert baseline == [1.0] * 128
    graded = {pair: s for pair, s in zip(batch, mixed, strict=True)}
    assert [graded[p] for p in correct] == [1.0] * 128
    assert [s for p, s in zip(batch, mixed, strict=True) if p in bad] == [0.0] * 4
    # Stated bound: the pathological answers cost at most their own limit each (plus a replacement
    # worker's start-up), on top of what the correct answers cost alone; they hold up nobody else's.
    startup = 10 * DEFAULT_TIMEOUT_S  # a generous allowance for restarting two killed workers on a busy machine
    assert t_mixed <= 2 * t_base + len(bad) * DEFAULT_TIMEOUT_S + startup, (t_base, t_mixed, pool.size)


ORPHAN = r'''
import sys, threading, time
sys.path.insert(0, {root!r})
from vlrl.rewards.answer_check import check_pool
pool = check_pool()
threading.Thread(target=lambda: pool.run("equal", ({slow!r}, "(x^2-1)^2"), 600), daemon=True).start()
while not pool._lent:
    time.sleep(0.05)
print(next(iter(pool._lent)).proc.pid, flush=True)
time.sleep(600)
'''


def test_a_worker_does_not_outlive_a_parent_killed_mid_check(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.support.paths import ROOT

    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN.format(root=str(ROOT), slow=SLOW))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        for _ in range(600):  # the worker notices within about a second; this only bounds a hang
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError("the worker kept computing after its parent died")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_where_no_worker_can_start_checks_run_in_their_thread(monkeypatch):
    """A sandbox without subprocesses: every answer graded wrong would train silently wrong, so the
    check runs in its own thread instead (huge numbers are still refused first)."""
    import subprocess

    from vlrl.rewards import answer_check

    def no_processes(*a, **kw):
        raise PermissionError("no subprocesses here")

    monkeypatch.setattr(subprocess, "Popen", no_processes)
    monkeypatch.setattr(answer_check, "_POOL", CheckPool(size=1))
    assert _in_thread(lambda: math_equal("(x+1)(x-1)", "x^2-1")) is True
    assert _in_thread(lambda: math_equal("10^10^10", "3")) is False
