"""``vlrl demo --compare``, no stand-ins of its own: one warm start trained with each caption reward
through the real pipeline, graded by one tiny QA judge answerer (the QA reward answerer's twin) (the Likert and rubric judges are trained)."""
