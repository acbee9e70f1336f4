"""Training on TRL from YAML recipes: GRPO, PTST stage schedules and SFT (see docs/training.md)."""
