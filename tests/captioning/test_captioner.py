"""The one "caption these images" function: per-record reasons, truncation flag, several captions per image."""

from __future__ import annotations

import pytest
from PIL import Image

from vlrl.captioning.captioner import caption_images, captions_from_file
from vlrl.core.backends import Backend, ChatResult, SamplingParams
from vlrl.core.sources import ImageItem


class Echo(Backend):
    """Answers with ``n`` samples whose finish reasons alternate length / stop; raises when told to."""

    kind = "echo"

    def __init__(self, raise_on_chat: bool = False, refuse: set[str] | None = None) -> None:
        super().__init__("echo")
        self.raise_on_chat = raise_on_chat
        self.refuse = refuse or set()
        self.requests = []

    def _chat(self, requests):
        if self.raise_on_chat:
            raise ConnectionError("server went away")
        self.requests.extend(requests)
        out = []
        for r in requests:
            n = r.sampling.n
            if r.id in self.refuse:
                out.append(ChatResult(texts=["I'm sorry, I can't help with that."] * n, finish_reasons=["stop"] * n))
                continue
            texts = [f"sample {k} of the picture called {r.id}" for k in range(n)]
            out.append(ChatResult(texts=texts, finish_reasons=["length" if k % 2 == 0 else "stop" for k in range(n)],
                                  prompt_tokens=7, completion_tokens=5 * n))
        return out

    def _score_choices(self, requests):  # pragma: no cover - not used
        raise NotImplementedError


def _images(tmp_path, k=3):
    paths = []
    for i in range(k):
        p = tmp_path / f"im{i}.png"
        Image.new("RGB", (16, 12), (40 * i, 80, 120)).save(p)
        paths.append(p)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return paths


def test_items_bad_image_is_a_reason_on_its_record_only(tmp_path):
    paths = _images(tmp_path)
    items = [ImageItem.from_path(p.name, p) for p in paths]
    items.insert(1, ImageItem.from_path("broken.png", tmp_path / "broken.png"))
    items.append(ImageItem.from_path("gone", "", error="no image in this row"))
    backend = Echo()
    out = caption_images(backend, items, "Describe.")
    assert [o.ok for o in out] == [True, False, True, True, False]
    assert out[1].reason.startswith("bad image: broken.png:") and "\n" not in out[1].reason
    assert out[4].reason == "bad image: gone: no image in this row"
    assert [r.id for r in backend.requests] == ["im0.png", "im1.png", "im2.png"]  # bad ones never reach the model


def test_truncated_flag_and_several_captions_per_image(tmp_path):
    paths = _images(tmp_path, 2)
    out = caption_images(Echo(), [Image.open(p) for p in paths], "Describe.", n=4, ids=["a", "b"])
    for o, name in zip(out, ["a", "b"], strict=True):
        assert len(o.captions) == 4 and len(set(o.captions)) == 4 and all(name in c for c in o.captions)
        assert o.caption == o.captions[0]
        assert o.truncations == [True, False, True, False] and o.truncated is True
        assert o.finish_reason == "length" and o.prompt_tokens == 7 and o.completion_tokens == 20


def test_checked_answers_and_backend_that_raises(tmp_path):
    paths = _images(tmp_path, 2)
    out = caption_images(Echo(refuse={"x"}), [str(p) for p in paths], "Describe.", ids=["x", "y"])
    assert out[0].caption is None and out[0].reason == "refusal"
    assert out[1].ok
    # min_words=None keeps what the model said (corpus captioning records it as is)
    kept = caption_images(Echo(refuse={"x"}), [str(p) for p in paths], "Describe.", ids=["x", "y"], min_words=None)
    assert kept[0].caption.startswith("I'm sorry")

    down = caption_images(Echo(raise_on_chat=True), [str(p) for p in paths], "Describe.")
    assert all(o.reason == "backend raised: ConnectionError: server went away" for o in down)
    with pytest.raises(ConnectionError):
        caption_images(Echo(raise_on_chat=True), [str(p) for p in paths], "Describe.", raise_backend_errors=True)


def test_loader_that_raises_and_prompt_per_image(tmp_path):
    paths = _images(tmp_path, 2)

    def boom():
        raise OSError("disk\nfull")

    backend = Echo()
    out = caption_images(backend, [lambda: Image.open(paths[0]), boom, lambda: Image.open(paths[1])], ["p0", "p1", "p2"])
    assert [o.ok for o in out] == [True, False, True]
    assert out[1].reason == "bad image: OSError: disk full"
    assert [r.messages[0]["content"][1]["text"] for r in backend.requests] == ["p0", "p2"]
    with pytest.raises(ValueError, match="2 prompts for 3 images"):
        caption_images(backend, paths + paths[:1], ["a", "b"])


def test_captions_file_stands_in_for_a_model(tmp_path):
    f = tmp_path / "caps.jsonl"
    f.write_text('{"image_id": "a", "caption": "a red square"}\n')
    out = captions_from_file(f, [ImageItem.from_path("a", "x.png"), ImageItem.from_path("b", "y.png")])
    assert out[0].caption == "a red square" and out[0].captions == ["a red square"]
    assert out[1].reason == f"no caption in {f}"


@pytest.mark.slow
def test_real_tiny_vlm_truncation_and_samples(tiny_vlm, tmp_path):
    """The flag follows what the real HF backend reports; n sampled captions come back per image."""
    from vlrl.core.backends import load_backend

    paths = _images(tmp_path, 3)
    items = [ImageItem.from_path(p.name, p) for p in paths] + [ImageItem.from_path("broken", tmp_path / "broken.png")]
    backend = load_backend(f"hf:{tiny_vlm}?device=cpu&dtype=float32")
    try:
        out = caption_images(backend, items, "Describe this image.", SamplingParams(max_tokens=3, temperature=1.0, seed=1),
                             n=3, min_words=None)
    finally:
        backend.close()
    assert out[3].caption is None and out[3].reason.startswith("bad image: broken:")
    for o in out[:3]:
        assert len(o.captions) == 3 and len(o.truncations) == 3
        assert o.completion_tokens <= 3 * 3
        assert o.truncated == (o.finish_reason == "length")
    # three tokens of a random model almost never end in EOS: most samples are cut off
    assert sum(t for o in out[:3] for t in o.truncations) >= 5


def test_n_defaults_to_the_sampling_params(tmp_path):
    paths = _images(tmp_path, 1)
    backend = Echo()
    out = caption_images(backend, [str(paths[0])], "Describe.", SamplingParams(n=3, temperature=1.0))
    assert len(out[0].captions) == 3 and backend.requests[-1].sampling.n == 3
    out = caption_images(backend, [str(paths[0])], "Describe.", SamplingParams(n=3, temperature=1.0), n=2)
    assert len(out[0].captions) == 2 and backend.requests[-1].sampling.n == 2
