"""``vlrl demo --compare``, no stand-ins of its own: one warm start trained with each caption reward
through the real pipeline, graded by the rule-based reader on held-out layouts (the QA reward answerer's twin
beside it; the Likert and rubric judges are trained)."""
