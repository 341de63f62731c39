"""certdp/data/encoders.py: the encoder on the run's device, the embedding cache (an interrupted
embedding resumes at its first missing chunk, a held signal lands after the chunk in progress is
written), progress records with rate and time left."""

from __future__ import annotations

import logging
import signal

import numpy as np
import pytest
import torch

from certdp import checkpoint
from certdp.data.encoders import SentenceEncoder, cpu_seconds, embed, embedding_dir, load_encoder
from certdp.errors import ConfigError
from tiny_encoder import write_tiny_encoder

TEXTS = [f"a charming and moving film {'great fun ' * (i % 5)}#{i}" for i in range(23)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tiny_encoder(folder, **kw) -> SentenceEncoder:
    return SentenceEncoder("minilm", folder, max_seq_length=16, batch_size=4, device="cpu", **kw)


class Interrupted(SentenceEncoder):
    """The tiny encoder, with ``on_call(n)`` run before its n-th call (an interruption)."""

    def __init__(self, folder, on_call):
        super().__init__("minilm", folder, max_seq_length=16, batch_size=4, device="cpu")
        self.on_call, self.calls = on_call, 0

    def encode(self, texts):
        self.calls += 1
        self.on_call(self.calls)
        return super().encode(texts)


def test_the_dataset_device_is_the_run_device(tiny):
    """The composed config hands the run's device to the encoder: one setting (device=...)."""
    from test_data_text import compose
    for dataset in ("imdb", "sst2"):
        for device in ("cpu", "cuda", "cuda:1", "auto"):
            cfg = compose("ags", [f"dataset={dataset}", f"device={device}"])
            assert cfg["dataset"]["device"] == device
            e = load_encoder({**cfg["dataset"], "encoder": "minilm", "encoder_path": str(tiny)})
            want = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
            assert e.device == want
    with pytest.raises(ConfigError, match="^dataset.device: got 'tpu'"):
        load_encoder({"encoder": "minilm", "encoder_path": str(tiny), "device": "tpu"})


def test_an_interrupted_embedding_resumes_at_its_first_missing_chunk(tiny, cache):
    full = embed(TEXTS, tiny_encoder(tiny), dataset="ref", split="train", chunk_size=5, progress=False)

    def stop(n):
        if n == 4:
            raise KeyboardInterrupt("simulated interruption")

    with pytest.raises(KeyboardInterrupt):
        embed(TEXTS, Interrupted(tiny, stop), dataset="toy", split="train", chunk_size=5, progress=False)
    folder = embedding_dir(tiny_encoder(tiny), "toy", "train", TEXTS)
    assert sorted(p.name for p in folder.glob("chunk_*.npy")) == [f"chunk_0000{i}.npy" for i in range(3)]
    again = Interrupted(tiny, lambda n: None)
    out = embed(TEXTS, again, dataset="toy", split="train", chunk_size=5, progress=False)
    assert again.calls == 2                                   # only the two missing chunks
    np.testing.assert_array_equal(out, full)                  # the same chunks: the same numbers


def test_a_signal_is_held_until_the_chunk_in_progress_is_written(tiny, cache, tmp_path):
    """SIGTERM during chunk 2 of a run: the chunk is written, the checkpoint saved, then the run
    stops; the next run computes the remaining chunks only."""
    stopped = []

    def interrupt(signum):
        stopped.append(signum)
        raise KeyboardInterrupt

    session = checkpoint.Session(folder=tmp_path / "run.resumable", interval_s=None, progress_s=None,
                                 record={"command": "test"}, interrupt=interrupt)

    def term(n):
        if n == 2:
            assert session.signal(signal.SIGTERM)             # held: a loop is open

    checkpoint.activate(session)
    try:
        with pytest.raises(KeyboardInterrupt):
            embed(TEXTS, Interrupted(tiny, term), dataset="toy", split="train", chunk_size=5, progress=False)
    finally:
        checkpoint.activate(None)
    folder = embedding_dir(tiny_encoder(tiny), "toy", "train", TEXTS)
    assert stopped == [signal.SIGTERM]
    assert sorted(p.name for p in folder.glob("chunk_*.npy")) == ["chunk_00000.npy", "chunk_00001.npy"]
    assert (tmp_path / "run.resumable" / checkpoint.STATE_FILE).exists()
    rest = Interrupted(tiny, lambda n: None)
    embed(TEXTS, rest, dataset="toy", split="train", chunk_size=5, progress=False)
    assert rest.calls == 3


def test_progress_records_say_texts_rate_and_time_left(tiny, cache, caplog, capsys):
    """Off a terminal (stderr captured), each chunk's record goes to the run's log and stderr."""
    session = checkpoint.Session(folder=None, interval_s=None, progress_s=0.0, stderr=True)
    checkpoint.activate(session)
    try:
        with caplog.at_level(logging.INFO, logger="certdp"):
            embed(TEXTS, tiny_encoder(tiny), dataset="toy", split="train", chunk_size=5, progress=None)
    finally:
        checkpoint.activate(None)
    recs = [r.getMessage() for r in caplog.records if r.name == checkpoint.PROGRESS_LOGGER]
    assert len(recs) == 5, recs
    assert recs[2].startswith("progress: embed step 3/5 toy/train with minilm-len16: 15/23 texts, ")
    assert " texts/s; elapsed " in recs[2] and "; remaining " in recs[2]
    assert "certdp progress: embed step 5/5 toy/train with minilm-len16: 23/23 texts" in capsys.readouterr().err
    start = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding toy/train")]
    assert len(start) == 1 and "23 of 23 texts to compute (0 cached" in start[0] and "idle CPU cores" in start[0]


def test_a_partly_cached_embedding_counts_only_its_own_chunks(tiny, cache, caplog):
    embed(TEXTS[:10], tiny_encoder(tiny), dataset="toy", split="a", chunk_size=5, progress=False)
    folder = embedding_dir(tiny_encoder(tiny), "toy", "a", TEXTS[:10])
    (folder / "chunk_00001.npy").unlink()
    session = checkpoint.Session(folder=None, interval_s=None, progress_s=0.0)
    checkpoint.activate(session)
    try:
        with caplog.at_level(logging.INFO, logger="certdp"):
            embed(TEXTS[:10], tiny_encoder(tiny), dataset="toy", split="a", chunk_size=5, progress=False)
    finally:
        checkpoint.activate(None)
    recs = [r.getMessage() for r in caplog.records if r.name == checkpoint.PROGRESS_LOGGER]
    assert len(recs) == 1 and recs[0].startswith("progress: embed step 2/2 toy/a with minilm-len16: 10/10 texts")


def test_the_cost_model_is_per_token_and_capped_by_the_sequence_length():
    assert cpu_seconds("minilm", 1300, 128) < cpu_seconds("minilm", 1300, 256) < cpu_seconds("mpnet", 1300, None)
    assert cpu_seconds("minilm", 40, 128) == cpu_seconds("minilm", 40, 256)      # short texts: not capped
    # the measured ratio (docs/datasets.md): mpnet at 384 tokens about 8x MiniLM at its 256
    assert 6 < cpu_seconds("mpnet", 1300, None) / cpu_seconds("minilm", 1300, None) < 10
