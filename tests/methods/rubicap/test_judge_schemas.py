

def test_a_raw_control_character_inside_a_string_is_not_a_reason_to_repair():
    # xgrammar (vLLM's structured output) lets a model write raw control characters in strings
    from vlrl.judge.structured import extract_final_json, extract_json

    text = '{"reason": "tab\there\x07", "winner": "B"}'
    assert extract_json(text) == ({"reason": "tab\there\x07", "winner": "B"}, False)
    assert extract_final_json(text, lambda obj: obj["winner"]) == "B"
