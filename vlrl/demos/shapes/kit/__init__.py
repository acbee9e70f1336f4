"""The shapes demos' shared public kit: the world, its format reward, recipes on disk, the warm-start
cache, caption noise, the reasoning task, report helpers and the demo base. No stand-ins, no models."""
