"""RubiCap: rubric-guided RL for dense captioning, plus the evaluations that go with it.

The method in four offline/online pieces (see ``docs`` and the shared method notes):

* :mod:`.teachers` — a committee of strong VLMs captions every image (offline, once).
* :mod:`.synthesis` — the student captions the same images; a rubric writer keeps the facts at least
  two teachers agree on, diagnoses what the student misses or gets wrong, and writes one weighted
  binary criterion per deficiency (offline, once per student).
* :mod:`vlrl.methods.rubicap.reward` — the ``rubicap_rubric`` reward: a light judge checks each rollout
  caption against its image's rubrics inside the RL loop.
* :mod:`.arena` and :mod:`.caption_qa` — pairwise judged comparison (both orders) and information
  density under word budgets.

Submodules are imported on use so ``import vlrl.methods.rubicap`` stays cheap.
"""
