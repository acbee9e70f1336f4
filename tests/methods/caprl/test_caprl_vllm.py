"""``caprl_qa`` with its answerer on a real vLLM server scores what the in-process answerer scores.

The case issue #23 measured: exact mode, ``min_letter_mass`` 0, six captions, the same tiny random
Qwen2 on both sides. Over vLLM the option letters are not among the 20 listed logprobs; reading
nothing there once gave every ask the uniform 0.2000 against 0.2127 in process. Now the letters
are read exactly (prompt_logprobs) and every caption's reward agrees within 1e-3. Greedy sample
mode gives the same answers as the in-process answerer; seeded sampling is compared by
distribution instead (tests/core/backends/test_openai_vllm.py), as two engines draw differently.
"""

from __future__ import annotations

import pytest

from vlrl.bench.reward import synthetic_captions
from vlrl.core.backends import load_backend
from vlrl.rewards import build_reward

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def answerers(tiny_lm, vllm_lm):
    hf = load_backend(f"hf:{tiny_lm}?device=cpu&dtype=float32")
    oa = load_backend(f"openai:{vllm_lm.base_url}@{vllm_lm.model}?timeout=300")
    yield hf, oa
    hf.close()
    oa.close()


@pytest.mark.parametrize("mode", ["exact", "sample"])
def test_six_rows_score_the_same_over_vllm_and_in_process(answerers, mode):
    captions, questions = synthetic_captions(6)
    scores = {}
    for name, backend in zip(("hf", "vllm"), answerers, strict=True):
        # exact mode at the recipe's temperature 0.6; sample mode greedy, the only setting in which
        # two engines' samples can be compared one by one (seeded samples differ by engine)
        reward = build_reward("caprl_qa", answerer=backend, mode=mode, questions_per_caption=4, rounds=1,
                              min_letter_mass=0.0, seed=1, temperature=0.6 if mode == "exact" else 0.0)
        scores[name] = reward.score(captions, questions=questions)
    want, got = scores["hf"], scores["vllm"]
    assert all(s.value is not None for s in want + got)
    for w, g in zip(want, got, strict=True):
        assert g.value == pytest.approx(w.value, abs=1e-3)
        assert g.details["parse_failure_rate"] == w.details["parse_failure_rate"]
    if mode == "exact":
        # letter information arrived: no ask fell back to chance, none was a parse failure
        assert all(g.details["parse_failure_rate"] == 0.0 and g.details["letter_mass"] > 0 for g in got)
        assert len({round(g.value, 4) for g in got}) > 1  # not the uniform 0.2 (or 0.25) everywhere


def test_the_public_preset_sends_its_raw_prompt_to_vllm_and_scores_what_the_in_process_answerer_scores(answerers):
    """``preset: caprl_public`` over vLLM goes through ``/v1/completions`` with the public prompt as
    it is (no chat template): greedy, both engines read the same tokens and name the same letters."""
    captions, questions = synthetic_captions(4)
    hf, oa = answerers
    scores = {}
    for name, backend in (("hf", hf), ("vllm", oa)):
        reward = build_reward("caprl_qa", answerer=backend, preset="caprl_public", questions_per_caption=3, seed=2,
                              temperature=0.0)
        scores[name] = reward.score(captions, questions=questions)
    for w, g in zip(scores["hf"], scores["vllm"], strict=True):
        assert w.value is not None and g.value == pytest.approx(w.value)
    # the server counted the prompt tokens the tokenizer makes of the raw text: nothing added around it
    from transformers import AutoTokenizer

    from vlrl.core.backends import ChatRequest, SamplingParams

    tok = AutoTokenizer.from_pretrained(hf.model)
    text = "<|im_start|>user\nWhat colour?<|im_end|>\n<|im_start|>assistant\nThe answer is"
    (res,) = oa.chat([ChatRequest([{"role": "user", "content": text}], SamplingParams(max_tokens=2), prompt=text)])
    assert res.ok and res.prompt_tokens == len(tok(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def vllm_with_generation_defaults(tiny_lm, tmp_path_factory):
    """vLLM serving a copy of the tiny LM whose ``generation_config.json`` carries sampling defaults
    (Qwen2.5-3B-Instruct ships top_k 20 and repetition_penalty 1.05; here top_k 1, so a leak is
    plain to see), started as the recipe starts the answerer: no ``--generation-config`` flag, so
    vLLM fills every field a request leaves out from that file."""
    import json
    import shutil

    from tests.support.vllm import missing_reason, required, vllm_python, vllm_serve

    if vllm_python() is None:
        if required():
            pytest.fail(f"vLLM is required here but missing: {missing_reason()}", pytrace=False)
        pytest.skip(missing_reason())
    model = tmp_path_factory.mktemp("gen_defaults") / "lm"
    shutil.copytree(tiny_lm, model)
    cfg_path = model / "generation_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    cfg_path.write_text(json.dumps({**cfg, "top_k": 1, "repetition_penalty": 1.05}))
    with vllm_serve(model, "tiny-lm-defaults", tmp_path_factory.mktemp("vllm") / "defaults.log") as served:
        yield served


def test_the_public_presets_raw_prompt_samples_with_the_public_settings_not_the_models_defaults(
        vllm_with_generation_defaults):
    """The public reward samples with top_p 1, no top-k and no repetition penalty (its engine's
    neutral SamplingParams). Over HTTP the raw-prompt route states all of them: the served model's
    own defaults (here top_k 1, which would make every seed give the same answer) add nothing."""
    from vlrl.core.backends import ChatRequest, SamplingParams
    from vlrl.core.prompts import render

    served = vllm_with_generation_defaults
    oa = load_backend(f"openai:{served.base_url}@{served.model}?timeout=300")
    text = render("caprl_public_prompt", caption="A red bus.", question="What colour is the bus?\n   - A) Red\n"
                  "   - B) Blue\n   - F) Can not answer based on the caption")
    try:
        res = oa.chat([ChatRequest([{"role": "user", "content": text}],
                                   SamplingParams(max_tokens=4, temperature=1.0, seed=s), prompt=text) for s in range(12)])
    finally:
        oa.close()
    assert all(r.ok for r in res)
    assert len({r.text for r in res}) > 1  # twelve seeds at T=1 over a random model: not one greedy answer
