"""vlrl: reinforcement-learning post-training for vision-language captioners.

Three methods on shared parts: CapRL (QA-utility reward), RubiCap (rubric-judge reward) and
Vision-R1 (cold start + PTST-staged GRPO with a hard format/answer reward). See README.md.
"""

__version__ = "0.1.0"
