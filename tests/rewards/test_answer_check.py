"""The shared boxed-answer reader and timeout-safe math_verify check (vlrl.rewards.answer_check),
used by both Prism's reasoning mode and Vision-R1's reward."""

from __future__ import annotations

import threading

from vlrl.methods.caprl import prism
from vlrl.methods.vision_r1 import reward as hfrrf
from vlrl.rewards.answer_check import last_boxed, math_equal, math_number


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
