"""The core every method stands on: backends, images, prompts, the pipeline store, records and sources."""
