"""Every ``vlrl bench`` benchmark, in one place: each measures both sides of a ratio in one run.

* :mod:`vlrl.bench.caption` — batched ``vlrl caption`` against one image per ``generate``
  (:mod:`vlrl.bench.caption_single`, plain transformers), and peak RSS against corpus size.
* :mod:`vlrl.bench.reward` — ``caprl_qa`` in ``exact`` against ``sample`` mode on one backend, with
  the reward's share of a tiny GRPO step (:mod:`vlrl.bench.grpo_share`).
* :mod:`vlrl.bench.qa_write` — peak memory of the curated QA dataset write at 1x and 10x corpus size
  (:mod:`vlrl.bench.qa_write_child`, one process per size).
* :mod:`vlrl.bench.paths` — batched against one-at-a-time for every other batched model path.
* :mod:`vlrl.bench.guards` — what the cheap guard layer costs per caption (goal: 1 ms or less).
* :mod:`vlrl.bench.commands` — the ``vlrl bench`` command group.

The package sits beside the demos, above training: a bench may drive a trainer and any method.
Child processes are modules run with ``python -m``, not scripts held in strings. Nothing is imported
here, so a child (``caption_single`` must load no vlrl code) starts as light as plain Python.
"""
