"""Rule-based stand-ins, each a ``py:`` backend: RubiCap's teacher committee and rubric writer, and
Vision-R1's cold-start VLM and reasoner. They are code, not models: nothing here is trained."""
