"""The judge seam: every structured answer a model gives vlrl is asked for and parsed here.

A judge is a backend, a prompt, a parser, a retry policy and token accounting. Rubric writers,
rubric judges, arena judges and MCQ writers all go through :func:`chat_structured`, so "the model
answered prose / a truncated object / the wrong ids" is handled once, the same way, and ends as a
reason on the record instead of a silent default.
"""

from vlrl.judge.structured import (
    InvalidOutput,
    Structured,
    chat_structured,
    extract_final_json,
    extract_json,
    json_field,
)

__all__ = ["InvalidOutput", "Structured", "chat_structured", "extract_final_json", "extract_json", "json_field"]
