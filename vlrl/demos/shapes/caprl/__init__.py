"""``vlrl demo`` (CapRL): the real pipeline (QA curation, GRPO on ``caprl_qa``, caption-QA evaluation)
on the tiny models of :mod:`~vlrl.demos.shapes.tiny_models`; its data and evaluation are shared."""
