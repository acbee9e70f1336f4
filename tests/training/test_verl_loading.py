"""The adapter loaded by verl's OWN reward loading (``load_reward_manager`` → naive manager), in
several worker processes, as a verl run does: keys must agree across processes, OmegaConf settings
must take effect, and a pathological answer must not hang a reward thread."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.support.paths import ROOT

pytest.importorskip("verl", reason="verl is not installed (make install adds verl==0.9.1 --no-deps)")
pytest.importorskip("omegaconf", reason="verl's config library is not installed")

ADAPTER = ROOT / "vlrl" / "training" / "verl.py"

SAMPLES = {
    0: [("<think>6*7</think><answer>42</answer>", "42", {}), ("<think>x</think><answer>\\frac{1}{2}</answer>", "0.5", {}),
        ("no format at all", "42", {})],
    1: [("<think>x</think><answer>9^{9^{9^{9}}}</answer>", "3", {}), ("<think>x</think><answer>5 cm</answer>", "5 m", {}),
        ("<think>x</think><answer>B</answer>", "B", {"choices": ["1", "2"]})],
}


def _worker(args):
    rank, tokenizer_dir = args
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    cfg = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": str(ADAPTER), "name": "compute_score",
                                   "reward_kwargs": {"reward": "hfrrf",
                                                     "settings": {"soft": True, "guards": {"policy": "veto"}}}},
        "reward_manager": {"source": "register", "name": "naive"},
    }})
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    manager = load_reward_manager(cfg, tok)
    out = []
    for text, gold, extra in SAMPLES[rank]:
        ids = torch.tensor([tok.encode(text)])
        data = DataProto.from_dict(
            tensors={"responses": ids, "attention_mask": torch.ones_like(ids)},
            non_tensors={"data_source": np.array(["math"], dtype=object),
                         "reward_model": np.array([{"ground_truth": gold}], dtype=object),
                         "extra_info": np.array([dict(extra)], dtype=object)},
        )
        res = manager.loop.run_until_complete(manager.run_single(data))
        out.append((res["reward_extra_info"]["answer_ok"], list(res["reward_extra_info"])))
    return out


@pytest.mark.slow
def test_verl_loads_the_adapter_in_several_worker_processes(tmp_path):
    from vlrl.core.tiny import cached_tiny

    tok_dir = str(cached_tiny("qwen2"))
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        results = list(pool.map(_worker, [(0, tok_dir), (1, tok_dir)], timeout=600))
    answer_ok = [s for r in results for s, _ in r]
    keys = {tuple(k) for r in results for _, k in r}
    assert len(keys) == 1, keys  # one key schema in every process, whatever the samples were
    (schema,) = keys
    assert schema[:2] == ("score", "applicable") and "guard/any" in schema  # nested guards took effect
    # plain, math_verify off the main thread, no format; the tower timed out (graded wrong, no hang);
    # 5 cm is not 5 m; a letter answer
    assert answer_ok == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_mixed_rewards_stack_through_verls_own_loader():
    """One verl batch whose samples pick different rewards (extra_info["vlrl_reward"]), each with its own
    settings block, through verl's own load_reward_manager and run_single, stacked the way verl's
    reward loop stacks them: by the keys of the first sample (#30 finding 7)."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    from vlrl.core.tiny import cached_tiny

    cfg = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": str(ADAPTER), "name": "compute_score",
                                   "reward_kwargs": {"reward_settings": {"hfrrf": {"soft": True},
                                                                         "guards": {"enabled": ["self_praise"]}}}},
        "reward_manager": {"source": "register", "name": "naive"},
    }})
    tok = AutoTokenizer.from_pretrained(str(cached_tiny("qwen2")))
    manager = load_reward_manager(cfg, tok)
    samples = [("<think>x</think><answer>41</answer>", "42", "hfrrf"),
               ("This caption is complete and accurate.", "", "guards"),
               ("A red bus.", "", "rubicap_rubric"),  # no judge given: a failed sample, not an exception
               ("<think>x</think><answer>42</answer>", "42", "hfrrf")]
    infos = []
    for text, gold, reward in samples:
        ids = torch.tensor([tok.encode(text)])
        data = DataProto.from_dict(
            tensors={"responses": ids, "attention_mask": torch.ones_like(ids)},
            non_tensors={"data_source": np.array(["mixed"], dtype=object),
                         "reward_model": np.array([{"ground_truth": gold}], dtype=object),
                         "extra_info": np.array([{"vlrl_reward": reward}], dtype=object)},
        )
        infos.append(manager.loop.run_until_complete(manager.run_single(data))["reward_extra_info"])
    keys = list(infos[0])
    stacked = {k: np.array([info[k] for info in infos]) for k in keys}  # verl's reward loop; no KeyError
    assert all(list(i) == keys for i in infos)
    assert stacked["score"].tolist() == [pytest.approx(0.2), -1.0, 0.0, 1.0]  # hfrrf soft; the guard fired
    assert stacked["reward_failed"].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_captions_of_one_prompt_share_their_draws_through_verls_own_loader():
    """verl's naive manager scores each rollout on its own. CapRL's common draws must survive that: every
    caption of one prompt (same extra_info index) is asked the same questions in the same option orders,
    as a TRL group is; another prompt gets other draws (#30 finding 6). The answerer is a real HTTP
    server on 127.0.0.1."""
    import re

    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    from tests.support.fake_openai import FakeOpenAI
    from vlrl.core.tiny import cached_tiny

    questions = [{"question": f"Question number {i}?", "options": ["red", "blue", "green", "yellow"],
                  "answer": "ABCD"[i % 4]} for i in range(8)]
    tok = AutoTokenizer.from_pretrained(str(cached_tiny("qwen2")))
    with FakeOpenAI(model="answerer", reply=lambda body: "The answer is A") as srv:
        cfg = OmegaConf.create({"reward": {
            "custom_reward_function": {"path": str(ADAPTER), "name": "caprl_qa", "reward_kwargs": {"settings": {
                "answerer": srv.spec(), "mode": "sample", "questions_per_caption": 3, "rounds": 1}}},
            "reward_manager": {"source": "register", "name": "naive"},
        }})
        manager = load_reward_manager(cfg, tok)

        def asked(caption, index):
            before = len(srv.bodies)
            ids = torch.tensor([tok.encode(caption)])
            data = DataProto.from_dict(
                tensors={"responses": ids, "attention_mask": torch.ones_like(ids)},
                non_tensors={"data_source": np.array(["caps"], dtype=object),
                             "reward_model": np.array([{"ground_truth": None}], dtype=object),
                             "extra_info": np.array([{"questions": questions, "index": index}], dtype=object)},
            )
            res = manager.loop.run_until_complete(manager.run_single(data))
            assert res["reward_extra_info"]["applicable"] == 1.0
            texts = [m["content"] if isinstance(m["content"], str) else str(m["content"])
                     for b in srv.bodies[before:] for m in b["messages"] if m["role"] == "user"]
            # each ask: which question, with its options in the order shown
            return sorted(re.search(r"Question number \d\?[\s\S]*", t).group(0).replace(caption, "") for t in texts)

        group = [asked(c, 7) for c in ("A red bus at a stop.", "A blue bus.", "Two buses by a station.", "A bus.")]
        others = [asked("A red bus at a stop.", i) for i in range(6)]
    assert group[0] and all(g == group[0] for g in group)
    assert len({tuple(o) for o in others}) > 1
