"""The OpenRLHF payload as a vision-language run really sends it: the query is the prompt's token
ids (with the processor's image tokens expanded) and the response's, decoded with special tokens."""

from __future__ import annotations

import pytest

from tests.serve.test_service import post
from tests.support.serve import CAPRL_SETTINGS, QUESTION_BANK, app_server
from vlrl.serve.app import build_app
from vlrl.serve.compat import PayloadError, openrlhf_rows
from vlrl.serve.service import ROW_ERROR, ServeSettings


def openrlhf_query(captions: list[str]) -> tuple[str, list[str]]:
    """(prompt, queries) as OpenRLHF's single-turn executor builds them for a Qwen2.5-VL policy."""
    from PIL import Image
    from transformers import AutoProcessor

    from vlrl.core.tiny import cached_tiny

    proc = AutoProcessor.from_pretrained(cached_tiny("qwen2_5_vl"))
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image in detail."}]}]
    prompt = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = proc(text=[prompt], images=[Image.new("RGB", (112, 112), "red")])["input_ids"][0]
    ids = list(ids.tolist() if hasattr(ids, "tolist") else ids)
    queries = []
    for caption in captions:
        response = proc.tokenizer(caption + "<|im_end|>", add_special_tokens=False)["input_ids"]
        queries.append(proc.tokenizer.decode(ids + response, skip_special_tokens=False))
    assert not queries[0].startswith(prompt)  # the image tokens are expanded in the query
    return prompt, queries


def test_the_response_is_cut_from_a_vision_query_with_expanded_image_tokens():
    captions = [f"A red circle number {i} with {i} squares." for i in range(1, 4)]
    prompt, queries = openrlhf_query(captions)
    rows, _ = openrlhf_rows({"query": queries, "prompts": [prompt] * 3, "labels": [QUESTION_BANK] * 3}, "questions")
    assert [r["completion"] for r in rows] == captions
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS))
    with app_server(build_app(conf)) as root:
        _, _, ans = post(root, "/openrlhf", {"query": queries, "prompts": [prompt] * 3, "labels": [QUESTION_BANK] * 3})
        _, _, v1 = post(root, "/v1/score", {"rows": [{"id": i, "completion": c, "questions": QUESTION_BANK}
                                                      for i, c in enumerate(captions)]})
    assert ans["rewards"] == [r["reward"] for r in v1["results"]]


def test_a_query_that_does_not_hold_its_prompt_is_that_rows_error_not_its_caption():
    rows, _ = openrlhf_rows({"query": ["<|im_start|>user\nsomething else<|im_end|>\nA caption."],
                             "prompts": ["<|im_start|>user\nDescribe.<|im_end|>\n"], "labels": [[]]}, "questions")
    assert "does not start with its prompt" in rows[0][ROW_ERROR]
    with pytest.raises(PayloadError):
        openrlhf_rows({"query": "x"}, "questions")


def test_the_service_answers_a_query_without_its_prompt_with_that_rows_error():
    from tests.support.serve import WORDS

    body = {"query": ["<|im_start|>user\nsomething else<|im_end|>\nA caption.", "<s>Describe.</s>two words</s>"],
            "prompts": ["<|im_start|>user\nDescribe.<|im_end|>\n", "<s>Describe.</s>"]}
    with app_server(build_app(ServeSettings(WORDS, {}))) as root:
        status, _, ans = post(root, "/openrlhf", body)
    assert status == 200 and ans["rewards"] == [None, 2.0]  # the trailing </s> is not a word of the response
    assert "does not start with its prompt" in ans["errors"][0]["error"]
