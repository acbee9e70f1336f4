"""The reward service with its answerer on a real vLLM server, the engine GPU users serve it with.

The session's tiny Qwen2 served by vLLM's CPU build (``vllm_lm``, tests/conftest.py) answers for
``caprl_qa`` in exact mode (letter probabilities, no sampling). Rows sent to ``vlrl serve reward`` in
split, concurrent requests, which the service merges into its own batches, must get the rewards
``vlrl reward score`` computes in process against the same server, and the answerer's requests must
really have reached vLLM.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.serve.test_service import get, post
from tests.support.serve import app_server, caprl_rows
from vlrl.serve.app import build_app
from vlrl.serve.service import ServeSettings

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_service_with_a_vllm_answerer_gives_reward_score_s_rewards(vllm_lm, tmp_path):
    from vlrl.rewards import build_reward
    from vlrl.rewards.scoring import score_rows_file

    settings = {"answerer": f"openai:{vllm_lm.base_url}@{vllm_lm.model}?timeout=300&max_retries=1", "mode": "exact",
                "questions_per_caption": 2, "rounds": 1, "min_letter_mass": 0.0}
    rows, batch = caprl_rows(24), 12
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    score_rows_file(build_reward("caprl_qa", **settings), src, tmp_path / "out.jsonl", batch_size=batch, progress=False)
    want = {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    scored = [r["reward"] for r in want.values() if r["reward"] is not None]
    assert len(set(scored)) > 2, "rewards all alike: the comparison would prove nothing"

    before = vllm_lm.metrics().get("vllm:request_success_total", 0.0)
    conf = ServeSettings("caprl_qa", dict(settings), max_batch_rows=8, max_wait_ms=30)
    with app_server(build_app(conf)) as root:
        assert get(root, "/ready")[0] == 200
        rng, pieces = random.Random(1), []
        for k in range(0, len(rows), batch):  # batch k of reward score is step k
            chunk = rows[k : k + batch]
            cut = sorted(rng.sample(range(1, len(chunk)), 2))
            pieces += [(k // batch, p) for p in (chunk[: cut[0]], chunk[cut[0] : cut[1]], chunk[cut[1] :])]
        rng.shuffle(pieces)
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda sp: post(root, "/v1/score", {"rows": sp[1], "step": sp[0]}), pieces))
        status, metrics = get(root, "/metrics")
    assert vllm_lm.metrics().get("vllm:request_success_total", 0.0) > before  # the asks went to vLLM
    got = {}
    for (_, sent), (code, _, body) in zip(pieces, answers, strict=True):
        assert code == 200 and [r["id"] for r in body["results"]] == [r["id"] for r in sent]
        got.update({r["id"]: r for r in body["results"]})
    assert got.keys() == want.keys()
    for rid, r in got.items():
        assert r["error"] is None and (r["reward"] is None) == (want[rid]["reward"] is None), (rid, r, want[rid])
        if r["reward"] is not None:
            assert r["reward"] == pytest.approx(want[rid]["reward"], abs=1e-4), rid
    assert status == 200 and "vlrl" in metrics
