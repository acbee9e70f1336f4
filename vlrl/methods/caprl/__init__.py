"""CapRL: caption quality as QA utility.

* :mod:`vlrl.methods.caprl.mcq` — the multiple-choice question record as every CapRL stage sees it
  (normalisation, option shuffling with a "cannot answer" option, answer-letter parsing).
* :mod:`vlrl.methods.caprl.mcq_parse` — turning a VLM's free-text MCQs into validated questions.
* :mod:`vlrl.methods.caprl.curate` — the offline QA curation pipeline (generate, parse, filter).
* :mod:`vlrl.methods.caprl.smoke` — the reward smoke check (real vs generic/empty/shuffled captions).
* :mod:`vlrl.methods.caprl.prism` — Prism-style decoupled evaluation (caption, then answer from text).

The reward itself lives in :mod:`vlrl.methods.caprl.reward` next to the other rewards.
"""
