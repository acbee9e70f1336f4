"""In-process backend on real tiny models: batching, n samples, exact choice scores, errors, cache."""

from __future__ import annotations

import math

import pytest
from PIL import Image

from vlrl.core.backends import ChatRequest, ChoiceRequest, SamplingParams, load_backend, parse_spec


def _img(color="red"):
    return Image.new("RGB", (64, 48), color)


def test_spec_parsing_errors():
    with pytest.raises(ValueError, match="no kind"):
        parse_spec("/some/path")
    with pytest.raises(ValueError, match="unknown kind"):
        parse_spec("grpc:foo")
    with pytest.raises(ValueError, match="API key"):
        parse_spec("openai:http://127.0.0.1:1/v1@m?api_key=sk-123")
    assert parse_spec("hf:/m?device=cpu&batch_size=4") == ("hf", "/m", {"device": "cpu", "batch_size": "4"})


def test_missing_model_folder_is_clear(tmp_path):
    from vlrl.core.backends import BackendError

    with pytest.raises(BackendError, match="does not exist"):
        load_backend(f"hf:{tmp_path / 'nope'}")


def test_vlm_chat_batched_with_images_and_bad_record(tiny_vlm, tmp_path):
    b = load_backend(f"hf:{tiny_vlm}?batch_size=2")
    png = tmp_path / "ok.png"
    _img("green").save(png)
    reqs = [
        ChatRequest([{"role": "user", "content": [{"type": "image", "image": _img()}, {"type": "text", "text": "Describe."}]}],
                    SamplingParams(max_tokens=6, temperature=1.0, n=3, seed=0), id="pil"),
        ChatRequest([{"role": "user", "content": [{"type": "image", "image": str(png)}, {"type": "text", "text": "Describe this image in detail."}]}],
                    SamplingParams(max_tokens=6, temperature=1.0, n=3, seed=0), id="path"),
        ChatRequest([{"role": "user", "content": "text only"}], SamplingParams(max_tokens=4), id="text"),
        ChatRequest([{"role": "user", "content": [{"type": "image", "image": str(tmp_path / "missing.png")}]}], id="missing"),
    ]
    res = b.chat(reqs)
    assert [len(r.texts) for r in res[:3]] == [3, 3, 1]
    assert all(r.ok for r in res[:3])
    assert all(r.finish_reasons[0] in ("stop", "length") for r in res[:3])
    assert res[0].prompt_tokens > res[2].prompt_tokens  # image tokens are counted
    assert not res[3].ok and res[3].error.startswith("missing:") and "\n" not in res[3].error
    snap = b.stats.snapshot()
    assert snap["requests"] == 4 and snap["failures"] == 1 and snap["completion_tokens"] > 0


def test_greedy_is_batch_invariant(tiny_vlm):
    """Left padding must not change a greedy answer: alone vs in a batch with a longer prompt."""
    b = load_backend(f"hf:{tiny_vlm}")
    short = ChatRequest([{"role": "user", "content": [{"type": "image", "image": _img()}, {"type": "text", "text": "Hi"}]}],
                        SamplingParams(max_tokens=8))
    long = ChatRequest([{"role": "user", "content": [{"type": "image", "image": _img("blue")}, {"type": "text", "text": "Describe every object " * 6}]}],
                       SamplingParams(max_tokens=8))
    alone = b.chat([short])[0].text
    batched = b.chat([long, short])[1].text
    assert alone == batched


def test_score_choices_exact_and_normalised(tiny_lm, tiny_vlm):
    for path in (tiny_lm, tiny_vlm):
        b = load_backend(f"hf:{path}")
        res = b.score_choices([
            ChoiceRequest([{"role": "user", "content": "Which? A. cat B. dog C. cannot answer"}], ["A", "B", "C"], prefix="The answer is"),
            ChoiceRequest([{"role": "user", "content": "Which? A. cat B. dog"}], ["A", "B"]),
        ])
        for r in res:
            assert r.ok and r.exact and r.method == "logits"
            assert math.isclose(sum(r.probs.values()), 1.0, rel_tol=1e-6)
            assert 0 < r.mass <= 1


def test_score_choices_matches_generation_argmax(tiny_lm):
    """The exact distribution is the softmax of logits/T over the full vocabulary, every token that
    reads as a letter ("A", " A", "\nA") counted for it; at T=0 it is the greedy token."""
    import torch
    from transformers import AutoTokenizer

    b = load_backend(f"hf:{tiny_lm}")
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    vocab_letters = [c for c in "ABCDEFGH"]
    msgs = [{"role": "user", "content": "pick a letter"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        logits = b.net(**ids).logits[0, -1].float()
    variants = {c: [i for i in range(len(tok)) if tok.decode([i]).strip() == c and i not in tok.all_special_ids]
                for c in vocab_letters}
    assert any(len(v) > 1 for v in variants.values())  # the byte-level vocab has " A" beside "A"
    for temp in (1.0, 0.6):
        r = b.score_choices([ChoiceRequest(msgs, vocab_letters, temperature=temp)])[0]
        p = torch.softmax(logits / temp, dim=-1)
        want = {c: float(p[v].sum()) for c, v in variants.items()}
        assert math.isclose(r.mass, sum(want.values()), rel_tol=1e-4)
        for c in vocab_letters:
            assert math.isclose(r.probs[c], want[c] / sum(want.values()), rel_tol=1e-4, abs_tol=1e-7)
    greedy = b.score_choices([ChoiceRequest(msgs, vocab_letters, temperature=0.0)])[0]
    top = int(torch.argmax(logits))
    assert greedy.mass == (1.0 if tok.decode([top]).strip() in vocab_letters else 0.0)


def test_response_cache_replays_without_calling_model(tiny_lm, tmp_path):
    spec = f"hf:{tiny_lm}"
    reqs = [ChatRequest([{"role": "user", "content": f"q{i}"}], SamplingParams(max_tokens=4)) for i in range(3)]
    b1 = load_backend(spec, cache=tmp_path)
    first = [r.text for r in b1.chat(reqs + reqs[:1])]  # duplicate inside one batch
    assert b1.stats.requests == 3  # the duplicate was sent once
    b1.close()
    b2 = load_backend(spec, cache=tmp_path)
    again = b2.chat(reqs)
    assert [r.text for r in again] == first[:3]
    assert all(r.cached for r in again)
    assert b2.stats.cache_hits == 3 and b2.stats.requests == 0
    # a different sampling seed is a different request
    other = b2.chat([ChatRequest(reqs[0].messages, SamplingParams(max_tokens=4, temperature=1.0, seed=7))])
    assert not other[0].cached


def test_unseeded_sampling_duplicates_are_independent_draws(tiny_lm, tmp_path):
    """k identical unseeded sampling requests in a batch are k draws, each replayed from the cache (an empty
    draw, which the random model sometimes makes by ending at once, is asked again: the cache never stores one)."""
    b = load_backend(f"hf:{tiny_lm}", cache=tmp_path)
    req = ChatRequest([{"role": "user", "content": "say something"}], SamplingParams(max_tokens=12, temperature=1.5))
    first = [r.text for r in b.chat([req] * 6)]
    assert b.stats.requests == 6
    assert len(set(first)) > 1  # 6 draws of 12 tokens from a random model are not all equal
    again = b.chat([req] * 6)
    assert sum(map(bool, first)) >= 3  # (an empty draw is rare: most of the six replay)
    for text, r in zip(first, again, strict=True):
        assert (r.text == text and r.cached) if text else not r.cached


@pytest.mark.parametrize(
    ("suffix", "words"),
    [
        ("", "no model folder"),  # "hf:" used to load the working directory
        ("?batch_size=abc", "not an integer"),
        ("?batch_size=0", "batch_size must be >= 1"),
        ("?dtype=float99", "not a torch floating dtype"),  # was an AttributeError traceback
        ("?device=banana", "not a torch device"),
        ("?device=cuda:0", "no CUDA device"),
    ],
)
def test_bad_hf_options_are_backend_errors(tiny_lm, suffix, words):
    import torch

    from vlrl.core.backends import BackendError

    if "cuda" in suffix and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(BackendError, match=words):
        load_backend("hf:" + suffix if not suffix else f"hf:{tiny_lm}{suffix}")


def test_folder_that_is_not_a_model_is_a_backend_error(tmp_path):
    """A folder without a usable config (or a file) gave a raw ValueError/OSError from transformers,
    which commands catching only BackendError printed as a traceback."""
    from vlrl.core.backends import BackendError

    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for target in ("empty", "file"):
        with pytest.raises(BackendError, match="cannot load a model from"):
            load_backend(f"hf:{tmp_path / target}")


def test_dtype_is_part_of_the_cache_identity(tiny_lm):
    a = load_backend(f"hf:{tiny_lm}?device=cpu&dtype=float32")
    b = load_backend(f"hf:{tiny_lm}?device=cpu&dtype=bfloat16")
    assert a.identity() != b.identity() and a.identity()["dtype"] == "torch.float32"


def test_close_logs_the_accounting_once(tiny_lm, tmp_path, caplog):
    """Every job that closes its backend ends with one line of what it cost (HF backends logged
    nothing), cache hits included when wrapped in the response cache."""
    import logging

    reqs = [ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2))]
    with caplog.at_level(logging.INFO, logger="vlrl.core.backends.base"):
        b = load_backend(f"hf:{tiny_lm}", cache=tmp_path)
        b.chat(reqs)
        b.close()
        b.close()
        b2 = load_backend(f"hf:{tiny_lm}", cache=tmp_path)
        b2.chat(reqs)
        b2.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "vlrl.core.backends.base"]
    assert len(lines) == 2, lines
    assert "requests=1 " in lines[0] and "completion_tokens=" in lines[0] and "cache_hits=0" in lines[0]
    assert "requests=0 " in lines[1] and "cache_hits=1" in lines[1] and str(tiny_lm.resolve()) in lines[1]


def test_unscorable_choices_are_per_request_errors(tiny_lm):
    """No choices used to come back ok with empty probs; an empty choice as 'list index out of
    range'. Both are now one clear error for that request only, and nothing is sent for it."""
    b = load_backend(f"hf:{tiny_lm}")
    m = [{"role": "user", "content": "Pick one."}]
    res = b.score_choices([
        ChoiceRequest(m, [], id="q-none"),
        ChoiceRequest(m, ["A", ""], id="q-empty"),
        ChoiceRequest(m, ["A", " A"], id="q-dup"),
        ChoiceRequest(m, ["A", "B"], prefix="The answer is ", id="q-ok"),
    ])
    assert [r.ok for r in res] == [False, False, False, True]
    assert res[0].error == "q-none: no choices given"
    assert "q-empty" in res[1].error and "empty" in res[1].error
    assert "q-dup" in res[2].error and "repeat" in res[2].error
    assert math.isclose(sum(res[3].probs.values()), 1.0) and res[3].method == "logits"
    assert b.stats.requests == 4 and b.stats.failures == 3


def test_sampling_params_refuse_nonsense_and_keep_stop_strings_whole():
    for bad in ({"max_tokens": 0}, {"n": 0}, {"temperature": -0.5}, {"top_p": 0.0}, {"top_k": -1}):
        with pytest.raises(ValueError, match="sampling"):
            SamplingParams(**bad)
    assert SamplingParams(stop="###").stop == ("###",)
    sp = SamplingParams(stop=["\n", "END"])
    assert sp.stop == ("\n", "END") and hash(sp) == hash(SamplingParams(stop=("\n", "END")))


def test_corrupt_or_blocked_cache_file_is_a_backend_error(tmp_path):
    """A garbage responses.sqlite (or a folder in its place) was a sqlite3 traceback in every CLI."""
    from vlrl.core.backends import BackendError

    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "responses.sqlite").write_bytes(b"not a database, just junk" * 200)
    (tmp_path / "blocked" / "responses.sqlite").mkdir(parents=True)
    for folder in ("garbage", "blocked"):
        with pytest.raises(BackendError, match="response cache .* cannot open it as SQLite"):
            load_backend("openai:http://127.0.0.1:9/v1@m", cache=tmp_path / folder)


def test_cache_keys_image_paths_by_file_content(tiny_vlm, tmp_path):
    """An image passed as a path was keyed by the path string: regenerating the file at the same
    path replayed the old answer from the cache."""
    img = tmp_path / "scene.png"
    b = load_backend(f"hf:{tiny_vlm}", cache=tmp_path / "cache")

    def ask():
        msgs = [{"role": "user", "content": [{"type": "image", "image": str(img)}, {"type": "text", "text": "What?"}]}]
        return b.chat([ChatRequest(msgs, SamplingParams(max_tokens=1))])[0]

    _img("red").save(img)
    assert not ask().cached and ask().cached
    _img("blue").save(img)
    assert not ask().cached
    _img("red").save(img)
    assert ask().cached
    b.close()


def _packed_asks():
    """QA-style asks: three captions of different lengths (prefixes pad differently), three
    questions each (suffixes of different lengths), two temperatures."""
    captions = ["A small red circle.", "Two large blue squares and a green star on a white page. " * 3,
                "A tiny yellow heart near the top left corner of an otherwise empty image. " * 2]
    questions = ["What colour is it? A. red B. blue C. green D. cannot answer",
                 "Which shape? A. circle B. square C. star D. heart E. cannot answer",
                 "Size? A. tiny B. large C. cannot answer"]
    reqs = []
    for c, caption in enumerate(captions):
        for q, question in enumerate(questions):
            letters = [chr(ord("A") + k) for k in range(question.count(". "))]
            reqs.append(ChoiceRequest(
                [{"role": "user", "content": f"Read the caption, then answer.\nCaption: {caption}\nQuestion: {question}"}],
                letters, prefix="The answer is", temperature=0.6 if c != 1 else 1.0, id=f"cap{c}/q{q}"))
    return reqs


@pytest.mark.parametrize("sliding", [False, True], ids=["full-attention", "sliding-window-cache"])
def test_packed_prefix_scoring_matches_one_request_at_a_time(tmp_path, monkeypatch, sliding):
    """Several captions' prefixes in one forward pass give the letter probabilities of scoring each
    request alone (a plain forward over its whole prompt). Weights are drawn wide so the letters
    depend on the context: a wrong position, mask or padding would move them."""
    import vlrl.core.backends.prefix_share as ps
    from vlrl.core.tiny import make_tiny

    # a window shorter than every prompt: padding inside the window would shift what each token sees
    extra = {"use_sliding_window": True, "sliding_window": 16, "layer_types": ["sliding_attention"] * 2} if sliding else {}
    path = make_tiny("qwen2", tmp_path / "lm", seed=3, initializer_range=0.5, **extra)
    b = load_backend(f"hf:{path}?device=cpu&dtype=float32&batch_size=16")
    packs = []
    real = ps.last_token_probs_packed

    def spy(net, prefixes, *a, **k):
        out = real(net, prefixes, *a, **k)
        packs.append((len(prefixes), out is not None))
        return out

    monkeypatch.setattr(ps, "last_token_probs_packed", spy)
    reqs = _packed_asks()
    together = b.score_choices(reqs)
    if sliding:  # the cache keeps sliding-window layers: padded prefixes are refused, one prefix per pass
        assert (3, False) in packs and all(n == 1 for n, ok in packs if ok)
    else:
        assert packs == [(3, True)]  # all three captions in one prefix pass
    packs.clear()
    alone = [b.score_choices([r])[0] for r in reqs]
    assert packs == []  # a single request takes the plain path: the reference
    spread = []
    for r, t, a in zip(reqs, together, alone, strict=True):
        assert t.ok and a.ok, (t.error, a.error)
        assert t.mass == pytest.approx(a.mass, abs=1e-5), r.id
        for letter in r.choices:
            assert t.probs[letter] == pytest.approx(a.probs[letter], abs=1e-4), (r.id, letter)
        spread.append(a.probs["A"])
    assert max(spread) - min(spread) > 0.05  # the letters do depend on the prompt: the check has teeth


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_one_generate_per_batch_and_samples_do_not_depend_on_batch_mates(tiny_vlm, temperature):
    """A batch is one left-padded ``generate`` (greedy or sampled, per-request seeds included), and a
    request's samples are the same alone, beside other requests, and on a rerun (issue #33)."""
    b = load_backend(f"hf:{tiny_vlm}?batch_size=8")
    calls = []
    generate = b.net.generate
    b.net.generate = lambda **kw: calls.append(kw["input_ids"].shape[0]) or generate(**kw)

    def req(color, text, seed):
        return ChatRequest([{"role": "user", "content": [{"type": "image", "image": _img(color)}, {"type": "text", "text": text}]}],
                           SamplingParams(max_tokens=8, temperature=temperature, n=2, seed=seed))

    me = req("red", "Describe.", 5)
    alone = b.chat([me])[0].texts
    mates = [req("blue", "Describe every object " * 4, 1), req("green", "Hi", 2), req("white", "What is here?", 3)]
    calls.clear()
    together = b.chat([mates[0], me, *mates[1:]])
    assert calls == [8]  # four requests x n=2 rows, one generate call
    assert together[1].texts == alone
    assert b.chat([*mates[::-1], me])[3].texts == alone
    if temperature > 0:  # seeds matter: another seed draws other samples for the others
        assert len({tuple(r.texts) for r in together}) > 1


def test_the_models_generation_config_adds_no_repetition_penalty(tiny_lm, tmp_path):
    """A sampled answer follows the request's SamplingParams alone. Qwen2.5 Instruct models ship a
    ``generation_config.json`` with ``repetition_penalty`` 1.05, which ``generate`` applies unless
    told otherwise; the public CapRL reward (and vlrl's own sampling settings) have none. Here the
    model's config carries an extreme penalty, so a leak would move the greedy answer away from
    plain argmax decoding of the raw prompt."""
    import json
    import shutil

    import torch
    from transformers import AutoTokenizer

    model = tmp_path / "lm"
    shutil.copytree(tiny_lm, model)
    cfg_path = model / "generation_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    cfg_path.write_text(json.dumps({**cfg, "repetition_penalty": 1.0e6}))
    b = load_backend(f"hf:{model}?device=cpu&dtype=float32")
    tok = AutoTokenizer.from_pretrained(model)
    text = "<|im_start|>user\nWhat colour is the bus?\n   - A) Red\n   - B) Blue<|im_end|>\n<|im_start|>assistant\nThe answer is"
    try:
        (res,) = b.chat([ChatRequest([{"role": "user", "content": text}], SamplingParams(max_tokens=8), prompt=text)])
        ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        eos = set(b._eos_ids())
        out: list[int] = []
        with torch.no_grad():
            for _ in range(8):
                nxt = int(torch.argmax(b.net(input_ids=ids).logits[0, -1]))
                out.append(nxt)
                if nxt in eos:
                    break
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    finally:
        b.close()
    assert res.ok and res.text == tok.decode(out, skip_special_tokens=True)
