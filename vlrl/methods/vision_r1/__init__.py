"""Vision-R1 path: cold-start data by modality bridging, reasoning evaluation, and the verl adapter."""
