"""``vlrl demo --method vision-r1``: the real cold start, SFT, PTST and single-stage GRPO, with a
rule-based VLM and reasoner as the cold start's stand-ins and a trained tiny student."""
