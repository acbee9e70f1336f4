"""CapRL: caption quality as QA utility.

* :mod:`vlrl.caprl.mcq` — the multiple-choice question record as every CapRL stage sees it
  (normalisation, option shuffling with a "cannot answer" option, answer-letter parsing).
* :mod:`vlrl.caprl.mcq_parse` — turning a VLM's free-text MCQs into validated questions.
* :mod:`vlrl.caprl.curate` — the offline QA curation pipeline (generate, parse, filter).
* :mod:`vlrl.caprl.smoke` — the reward smoke check (real vs generic/empty/shuffled captions).
* :mod:`vlrl.caprl.prism` — Prism-style decoupled evaluation (caption, then answer from text).
* :mod:`vlrl.caprl.bench` — ``sample`` vs ``exact`` reward throughput.

The reward itself lives in :mod:`vlrl.rewards.qa_utility` next to the other rewards.
"""
