"""Shared test setup: debug interval checks on, outputs and caches in temporary folders."""

import os

os.environ.setdefault("CERTDP_DEBUG", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Keep the user's real cache (datasets fetched once) but never write outputs into the repo.
    monkeypatch.setenv("CERTDP_OUT_TMP", str(tmp_path_factory.mktemp("out")))
    torch.manual_seed(0)
    yield
