"""The released models of an AGS run and applying them (``certdp predict RUN_DIR --input t.csv``).

The run's ``publish/released.json`` (written by ``certdp ags``: :func:`certdp.methods.ags.released_document`) holds, per (release,
epsilon), one released parameter vector, the model's layer widths and loss, and the
preprocessing (public-only unless the run says ``dp_end_to_end: false``).  Predicting is
post-processing of the DP output with the user's own rows: no private statistic is read.

Output: one row per (release, epsilon, input row) with the predicted class label; when the
table holds the run's target column, the accuracy per release is reported too (the same number
the run's log.txt gives for the published release when the table is the run's test rows).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.data.preprocessing import Preprocessing
from certdp.errors import ConfigError

RELEASED_FORMAT = "certdp.released/2"


def load_released(run_dir: str | Path) -> dict:
    """The ``publish/released.json`` of a finished AGS run (``RUN_DIR/publish/released.json``, or
    ``RUN_DIR/released.json`` when RUN_DIR is the published folder itself); a
    :class:`ConfigError` naming ``RUN_DIR`` otherwise."""
    folder = Path(run_dir).expanduser()
    path = folder / "released.json"
    if not path.is_file():
        path = folder / "publish" / "released.json"
    if not path.is_file():
        raise ConfigError("RUN_DIR", f"{path} does not exist; allowed: the folder of a finished certdp ags run "
                                     f"(it holds publish/released.json)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError("RUN_DIR", f"cannot read {path} ({str(e).splitlines()[0][:80]}); allowed: the "
                                     f"released.json that certdp ags wrote") from None
    if not isinstance(doc, dict) or doc.get("format") != RELEASED_FORMAT or doc.get("preprocessing") is None:
        raise ConfigError("RUN_DIR", f"{path} is not a {RELEASED_FORMAT} document with a preprocessing; allowed: "
                                     f"the released.json that certdp ags wrote")
    return doc


def read_table(path: str | Path, *, key: str = "--input") -> pd.DataFrame:
    """A table of raw rows (.csv, .tsv, .parquet); a one-line :class:`ConfigError` under ``key``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(key, f"{p} is not a file; allowed: a .csv (or .tsv, .parquet) table with the "
                                   f"model's feature columns")
    try:
        if p.suffix == ".parquet":
            return pd.read_parquet(p)
        return pd.read_csv(p, sep="\t" if p.suffix == ".tsv" else ",")
    except Exception as e:            # pandas raises many kinds: one line, naming the key
        raise ConfigError(key, f"cannot read {p} ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}); "
                                   f"allowed: a UTF-8 csv with a header row") from None


def predict(doc: dict, table: pd.DataFrame, *, mechanism: str | None = None,
            epsilon: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(predictions, summary) of every release of ``doc`` (or the one ``mechanism``/``epsilon``
    selects) on the raw rows of ``table``."""
    from certdp.models import ModelSpec
    prep = Preprocessing.from_dict(doc["preprocessing"])
    model = ModelSpec(tuple(doc["model"]["widths"]), doc["model"]["loss"])
    rels = [r for r in doc["releases"] if (mechanism is None or r["mechanism"] == mechanism)
            and (epsilon is None or np.isclose(r["epsilon"], epsilon))]
    if not rels:
        have = ", ".join(f"{r['mechanism']}@{r['epsilon']:g}" for r in doc["releases"])
        raise ConfigError("--mechanism/--epsilon", f"no release matches; allowed: {have}")
    x = torch.as_tensor(prep.apply(table, key="--input"), dtype=DTYPE)
    labelled = prep.target is not None and prep.target in [str(c) for c in table.columns]
    y = None
    if labelled:
        y = prep.encode_labels(table.set_axis([str(c) for c in table.columns], axis=1)[prep.target].to_numpy(),
                               key="--input", where=f"the rows of the input table's column {prep.target!r}")
    preds, summary = [], []
    for r in rels:
        theta = torch.tensor(r["parameters"], dtype=DTYPE)
        if theta.numel() != model.n_params:
            raise ConfigError("RUN_DIR", f"a release holds {theta.numel()} parameters, the model {model.n_params}; "
                                         f"allowed: an unmodified released.json")
        codes = model.classify(theta, x).numpy()
        labels = prep.decode_labels(codes)
        preds.append(pd.DataFrame({"mechanism": r["mechanism"], "epsilon": r["epsilon"], "row": np.arange(len(x)),
                                   "prediction": labels}))
        row = {"mechanism": r["mechanism"], "epsilon": r["epsilon"], "delta": r["delta"], "n_rows": len(x)}
        if y is not None:
            row["accuracy"] = float(np.mean(codes.astype(np.int64) == y))
        summary.append(row)
    return pd.concat(preds, ignore_index=True), pd.DataFrame(summary)
