"""One runner per command: each exposes ``run(cfg: dict) -> dict[str, DataFrame]``.

Runners compute and return tidy frames; they never write files (``results.py`` does)."""
