"""``vlrl demo --compare``: one warm start trained with each caption reward through the real pipeline
and graded by one independent tiny QA judge; the Likert and rubric judges are trained tiny models."""
