"""The bench's canned writer: it writes, and asked for choice scores it fails per request, loudly."""

from vlrl.bench.paths import Canned
from vlrl.core.backends import ChatRequest, ChoiceRequest


def test_canned_writes_and_refuses_choice_scoring_per_request():
    b = Canned("A. red")
    (chat,) = b.chat([ChatRequest([{"role": "user", "content": "x"}], id="c0")])
    assert chat.ok and chat.texts == ["A. red"]
    results = b.score_choices([ChoiceRequest([{"role": "user", "content": "q"}], ["A", "B"], id=f"q{i}") for i in range(2)])
    assert [r.ok for r in results] == [False, False] and "q1" in results[1].error
