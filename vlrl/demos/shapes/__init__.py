"""The shapes world behind ``vlrl demo`` (see docs/demo.md): ``kit/`` is the shared public kit,
``standins/`` the rule-based stand-ins (code, not models), ``tiny_models/`` the trained tiny models,
and ``caprl/``, ``rubicap/``, ``vision_r1/`` and ``compare/`` one runner each, all on a laptop CPU."""
