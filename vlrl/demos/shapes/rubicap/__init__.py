"""``vlrl demo --method rubicap``: the real RubiCap pipeline with rule-based teachers and writer
(:mod:`~vlrl.demos.shapes.standins`) and a trained tiny rubric judge as the reward."""
