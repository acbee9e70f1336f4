"""``vlrl demo --compare``, no stand-ins of its own: one warm start trained with each caption reward
through the real pipeline, graded by one independent tiny QA judge (the Likert and rubric judges are trained)."""
