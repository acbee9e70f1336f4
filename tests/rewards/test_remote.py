"""The ``remote`` reward against a real service on loopback: retries, Retry-After, the failure
budget, never a made-up 0.0, and verl's ``compute_score`` through the service."""

from __future__ import annotations

import pytest

from tests.support.serve import CAPRL_SETTINGS, QUESTION_BANK, WORDS, app_server, caprl_rows
from tests.support.servers import FaultProxy, free_port
from vlrl.rewards import build_reward
from vlrl.rewards.remote import RemoteRewardFailed
from vlrl.serve.app import build_app
from vlrl.serve.service import ServeSettings


class Steps:
    def __init__(self, step: int) -> None:
        self.global_step = step


def no_sleep(monkeypatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr("vlrl.rewards.remote.pause", waits.append)
    return waits


def test_remote_reward_equals_the_reward_in_process():
    rows = caprl_rows(12)
    local = build_reward("caprl_qa", **CAPRL_SETTINGS)
    completions = [[{"role": "assistant", "content": r["completion"]}] for r in rows]
    questions = [r["questions"] for r in rows]
    logged: dict[str, float] = {}
    with app_server(build_app(ServeSettings("caprl_qa", dict(CAPRL_SETTINGS)))) as root:
        remote = build_reward("remote", url=root)
        for step in (0, 3):
            want = local(prompts=None, completions=completions, completion_ids=None, trainer_state=Steps(step), questions=questions)
            got = remote(prompts=None, completions=completions, completion_ids=None, trainer_state=Steps(step),
                         questions=questions, log_metric=logged.__setitem__)
            assert got == want
    assert got[0] is None  # row 0 has no questions: None, as in process
    assert "remote/qa_acc" in logged  # details come back as sub-scores


def test_retries_through_faults_and_honours_retry_after(monkeypatch):
    waits = no_sleep(monkeypatch)
    with app_server(build_app(ServeSettings(WORDS, {}))) as root, FaultProxy(root) as proxy:
        proxy.script("500", "drop", "429")
        reward = build_reward("remote", url=proxy.root, retries=3, backoff_s=0.25, timeout_s=5)
        assert reward(completions=["one two three", "four"]) == [3.0, 1.0]
        assert len(proxy.posts()) == 4 and len(waits) == 3
    assert all(0 < w <= 2.0 for w in waits)

    dead = f"openai:http://127.0.0.1:{free_port()}/v1@m"  # not ready: 503 with Retry-After 2
    waits.clear()
    with app_server(build_app(ServeSettings("caprl_qa", {**CAPRL_SETTINGS, "answerer": dead}))) as root:
        reward = build_reward("remote", url=root, retries=2, backoff_s=0.01, max_backoff_s=30)
        with pytest.raises(RemoteRewardFailed, match="HTTP 503.*not ready"):
            reward(completions=["a caption"], questions=[QUESTION_BANK])
    assert waits == [2.0, 2.0]  # what the service asked, not the 0.01 s backoff


def test_failure_budget_gives_none_then_stops(monkeypatch):
    no_sleep(monkeypatch)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    reward = build_reward("remote", url=url, retries=1, failure_budget=1, timeout_s=2)
    first = reward(completions=["a", "b"])
    assert first == [None, None]  # never 0.0
    assert reward.health.failed == 2  # the trainer's no-signal stop sees backend failures
    with pytest.raises(RemoteRewardFailed, match="2 failed request.*failure_budget 1"):
        reward(completions=["a"])


def test_a_rejected_request_is_not_retried(monkeypatch):
    waits = no_sleep(monkeypatch)
    with app_server(build_app(ServeSettings(WORDS, {}, max_rows=2, max_body_bytes=400))) as root:
        # over the service's --max-rows: the client halves its requests (every row scored, in order)
        reward = build_reward("remote", url=root, retries=5)
        assert reward(completions=["a", "b c", "d e f"]) == [1.0, 2.0, 3.0] and reward.max_rows_per_request == 1
        split = build_reward("remote", url=root, max_rows_per_request=2)
        assert split(completions=["a", "b c", "d e f"]) == [1.0, 2.0, 3.0]
        # one row over the body limit cannot be split: a failed request, never retried
        with pytest.raises(RemoteRewardFailed, match="HTTP 413"):
            reward(completions=["word " * 200])
    assert waits == []


def test_verl_compute_score_through_the_service(monkeypatch):
    from vlrl.training import verl

    rows = caprl_rows(6)
    with app_server(build_app(ServeSettings("caprl_qa", dict(CAPRL_SETTINGS)))) as root:
        for i, r in enumerate(rows):
            info = {"questions": r["questions"], "index": i}
            want = verl.compute_score("caprl", r["completion"], None, info, reward="caprl_qa", settings=CAPRL_SETTINGS)
            got = verl.compute_score("caprl", r["completion"], None, info, reward="remote", settings={"url": root})
            assert {k: v for k, v in got.items() if v == v} == {k: v for k, v in want.items() if v == v}
    no_sleep(monkeypatch)
    with pytest.raises(RemoteRewardFailed):  # a dead service fails verl's step, never 0.0
        verl.compute_score("caprl", "x", None, {}, reward="remote", settings={"url": root, "retries": 1})


def test_verl_async_variant_stops_on_a_dead_service(monkeypatch):
    import asyncio

    from vlrl.training import verl

    no_sleep(monkeypatch)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RemoteRewardFailed):
        asyncio.run(verl.compute_score_async("caprl", "x", None, {}, reward="remote", settings={"url": url, "retries": 0}))


def test_a_stalled_service_times_out_and_is_retried(monkeypatch):
    waits = no_sleep(monkeypatch)
    with app_server(build_app(ServeSettings(WORDS, {}))) as root, FaultProxy(root, stall_s=5) as proxy:
        proxy.script("stall")
        reward = build_reward("remote", url=proxy.root, retries=1, timeout_s=0.5)
        assert reward(completions=["one two"]) == [2.0]
        assert len(proxy.posts()) == 2 and len(waits) == 1


def test_the_token_is_sent_and_never_shown(monkeypatch, caplog):
    secret = "sk-client-" + "z9" * 12
    monkeypatch.setenv("VLRL_T_CLIENT", secret)
    no_sleep(monkeypatch)
    with app_server(build_app(ServeSettings(WORDS, {}, token_env="VLRL_T_CLIENT"))) as root:
        assert build_reward("remote", url=root, token_env="VLRL_T_CLIENT")(completions=["a b c"]) == [3.0]
        monkeypatch.setenv("VLRL_T_WRONG", secret + "x")
        wrong = build_reward("remote", url=root, token_env="VLRL_T_WRONG", retries=2)
        with pytest.raises(RemoteRewardFailed, match="HTTP 401") as err:
            wrong(completions=["a"])
    assert secret not in str(err.value) and secret not in caplog.text


def test_an_answer_cut_off_half_way_is_retried_and_never_a_zero(monkeypatch):
    """A service killed while it writes its answer (fewer bytes than its Content-Length) is a failed
    try like a dropped connection: retried, then the failure budget; verl never scores it 0.0."""
    from vlrl.training import verl

    waits = no_sleep(monkeypatch)
    with app_server(build_app(ServeSettings(WORDS, {}))) as root, FaultProxy(root) as proxy:
        proxy.script("cut")
        reward = build_reward("remote", url=proxy.root, retries=2)
        assert reward(completions=["one two three"]) == [3.0]
        assert [s.action for s in proxy.posts()] == ["cut", "pass"] and len(waits) == 1
        proxy.default = "cut"
        with pytest.raises(RemoteRewardFailed, match="IncompleteRead"):
            build_reward("remote", url=proxy.root, retries=1)(completions=["a"])
        with pytest.raises(RemoteRewardFailed):
            verl.compute_score("x", "a b", None, {}, reward="remote", settings={"url": proxy.root, "retries": 1})


def test_an_answer_that_is_not_the_documented_shape_fails_the_request(monkeypatch):
    """A 200 whose results are not row objects (a proxy or another service on that port) is a failed
    request: RemoteRewardFailed, never an AttributeError that verl would score 0.0."""
    from vlrl.training import verl

    no_sleep(monkeypatch)
    with app_server(build_app(ServeSettings(WORDS, {}))) as root, FaultProxy(root) as proxy:
        proxy.default = lambda answer: {"results": [7]}
        with pytest.raises(RemoteRewardFailed, match="not the ones sent"):
            build_reward("remote", url=proxy.root, retries=0)(completions=["a"])
        with pytest.raises(RemoteRewardFailed):
            verl.compute_score("x", "a b", None, {}, reward="remote", settings={"url": proxy.root, "retries": 0})


def test_a_dataset_id_column_draws_as_in_process():
    """A dataset with an ``id`` column (CapRL's published data has one, per image): in process caprl_qa
    seeds its draws from it, so every rollout of one image is asked the same draws; through the
    service the column must still reach the reward, not be taken as the row's id and dropped."""
    rows = caprl_rows(12)
    completions = [[{"role": "assistant", "content": r["completion"]}] for r in rows]
    columns = {"questions": [QUESTION_BANK] * 12, "id": [f"img{i // 4}" for i in range(12)]}  # 3 images x 4 rollouts
    local = build_reward("caprl_qa", **CAPRL_SETTINGS)
    want = local(prompts=None, completions=completions, completion_ids=None, trainer_state=Steps(0), **columns)
    assert want != local(prompts=None, completions=completions, completion_ids=None, trainer_state=Steps(0),
                         questions=columns["questions"])  # the id column changes the draws: the check can fail
    with app_server(build_app(ServeSettings("caprl_qa", dict(CAPRL_SETTINGS)))) as root:
        remote = build_reward("remote", url=root)
        assert remote(prompts=None, completions=completions, completion_ids=None, trainer_state=Steps(0), **columns) == want


def test_a_completion_cut_off_at_the_cap_is_not_paid_through_the_service():
    """The remote wrapper is transparent (#30 audit, finding 2b's case behind `remote`): build_trainer gives it
    the length cap and EOS ids as it gives hfrrf in process, and the served hfrrf, which sees no token ids,
    grades a completion that reached the cap without EOS as truncated, as in process."""
    comp = [[{"role": "assistant", "content": "<think>6*7</think><answer>42</answer>"}]] * 3
    ids = [[5, 6, 7, 8], [5, 6, 7, 99], [5, 99]]  # at the cap of 4 without EOS; at the cap ending in EOS; short
    local = build_reward("hfrrf")
    with app_server(build_app(ServeSettings("hfrrf", {}))) as root:
        remote = build_reward("remote", url=root)
        for r in (local, remote):  # what build_trainer does to every reward function it is given
            assert hasattr(r, "max_completion_length") and r.max_completion_length is None
            r.max_completion_length, r.eos_token_ids = 4, [99]
        want = local(prompts=None, completions=comp, completion_ids=ids, answer=["42"] * 3)
        got = remote(prompts=None, completions=comp, completion_ids=ids, answer=["42"] * 3)
    assert want == [0.0, 1.0, 1.0]
    assert got == want
