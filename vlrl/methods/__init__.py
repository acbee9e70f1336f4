"""The methods vlrl implements, one folder each: ``caprl``, ``rubicap``, ``vision_r1``.

A method folder owns everything that is particular to it:

* ``reward.py`` — its rewards, registered with :func:`vlrl.rewards.register_reward` (found by
  :func:`vlrl.rewards.available_rewards` without any list to keep);
* its pipeline stages (curation, synthesis, cold start, evaluation) as modules;
* ``prompts/`` — its prompt templates (``.jinja``), rendered with :func:`vlrl.core.prompts.render`;
* ``commands.py`` — its commands as plain functions, and a ``register(groups)`` function that adds
  them to the ``vlrl`` verb groups (found by :mod:`vlrl.cli` the same way).

:mod:`vlrl.methods.options` holds what those commands share: the long-job options (the
:func:`~vlrl.methods.options.long_job` decorator) and the image flags. It lives here, not in the
CLI, because methods may not import the CLI; it imports only the core.

Methods import the core, the captioning and judge seams and the reward base; never each other,
training or the CLI. ``make test`` checks this with import-linter (``.importlinter``).
"""
