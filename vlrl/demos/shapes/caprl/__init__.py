"""``vlrl demo`` (CapRL), no stand-ins: the real QA curation, GRPO on ``caprl_qa`` and caption-QA
evaluation, on the trained tiny models; the RubiCap demo and the comparison reuse its data and evaluation."""
