"""``certdp predict`` on what it reads (certdp.certify.released): released.json checked field by
field in both formats, documents that would stall or crash a parser, labels however they are
written, the publish folder, and output paths that must never replace an input, a FIFO, a device or
a foreign file.  (predict's overflow, one-row and output-folder edges: test_cli.py.)"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from certdp import results
from cli_helpers import digest, fake_run, labelled_table, main_in_process, one_line, released_doc
from tools.prober.fixtures_surfaces import _set       # the prober's edit of a released.json: one home


@pytest.mark.parametrize("fmt", [1, 2])
@pytest.mark.parametrize("classes,labels", [((0, 1), ("0", "1")), ((0, 1), ("00", "01")), ((0, 1), ("0.0", "1.0")),
                                            ((0, 1), ("0", "1e0")), (("00", "01"), ("00", "01")),
                                            (("0.0", "1.0"), ("0.0", "1.0"))])
def test_predict_reports_the_true_accuracy_whatever_way_labels_are_written(tmp_path, fmt, classes, labels):
    src = tmp_path / "released.json"
    src.write_text(json.dumps(released_doc(fmt, classes)))
    want = labelled_table(tmp_path / "t.csv", labels)
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
    assert code == 0, err
    assert f"accuracy {want:.4f}" in err and 0.7 < want < 0.9
    pred = pd.read_csv(io.StringIO(out), dtype=str)
    assert list(pred.columns) == ["mechanism", "epsilon", "row", "prediction"] and len(pred) == 50
    assert set(pred.prediction) <= {str(c) for c in classes}


def test_predict_finds_the_publish_folder_and_the_old_top_level_file(tmp_path):
    run = fake_run(tmp_path / "ags" / "csv" / "r", "ags")
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    (run / "released.json").write_text(json.dumps(released_doc(1)))
    assert main_in_process("predict", str(run), "--input", str(tmp_path / "t.csv"))[0] == 0
    (run / "publish").mkdir()
    (run / "publish" / "released.json").write_text(json.dumps(released_doc(2)) + "x")   # format 2 first, and broken
    code, _, err = main_in_process("predict", str(run), "--input", str(tmp_path / "t.csv"))
    assert code == 2 and one_line(err).startswith("certdp: error: released.json: ") and "publish" in err


BAD_DOCS = [
    (("model",), KeyError, "released.json.model"),
    (("releases",), KeyError, "released.json.releases"),
    (("releases", 0, "mechanism"), KeyError, "released.json.releases[0].mechanism"),
    (("releases", 0, "mechanism"), "cauchy", "released.json.releases[0].mechanism"),
    (("releases", 0, "parameters", 1), "x", "released.json.releases[0].parameters[1]"),
    (("releases", 0, "parameters", 2), float("nan"), "released.json.releases[0].parameters[2]"),
    (("releases", 0, "parameters", 0), float("inf"), "released.json.releases[0].parameters[0]"),
    (("releases", 0, "parameters"), [1.0, 2.0], "released.json.releases[0].parameters"),
    (("releases", 0, "epsilon"), -1, "released.json.releases[0].epsilon"),
    (("releases", 0, "epsilon"), True, "released.json.releases[0].epsilon"),
    (("releases",), [], "released.json.releases"),
    (("model", "n_params"), 4, "released.json.model.n_params"),
    (("model", "widths"), [2, "x"], "released.json.model.widths[1]"),
    (("model", "widths"), [2, 10 ** 9], "released.json.model.widths"),
    (("model", "loss"), "mse", "released.json.model.loss"),
    (("preprocessing", "shift"), ["a", 0], "released.json.preprocessing"),
    (("preprocessing", "scale"), [0, 1], "released.json.preprocessing"),
    (("preprocessing", "columns"), ["a"], "released.json.preprocessing"),
    (("preprocessing",), None, "released.json.preprocessing"),
    (("preprocessing", "label_coding"), "index", "released.json.preprocessing"),
    (("format",), "certdp.released/9", "released.json.format"),
    (("bogus",), 1, "released.json.bogus"),
    (("task",), "regression", "released.json.task"),
]


@pytest.mark.parametrize("fmt", [1, 2])
@pytest.mark.parametrize("path,value,key", BAD_DOCS)
def test_released_json_is_checked_field_by_field(tmp_path, fmt, path, value, key):
    doc = released_doc(fmt)
    _set(doc, path, value)
    src = tmp_path / "released.json"
    src.write_text(json.dumps(doc))
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
    assert code == 2 and one_line(err).startswith(f"certdp: error: {key}") and "allowed:" in err, err
    assert str(src) in err and not out


def test_released_json_that_would_stall_or_crash_a_parser_is_refused(tmp_path):
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    for name, data in (("deep", b"[" * 200_000 + b"]" * 200_000), ("binary", b"\x00\xff" * 100),
                       ("text", b"not json"), ("list", b"[1, 2]")):
        src = tmp_path / f"{name}.json"
        src.write_bytes(data)
        t0 = time.time()
        code, _, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
        assert code == 2 and one_line(err).startswith("certdp: error: released.json") and time.time() - t0 < 10, err


def test_predict_output_never_replaces_its_input_a_fifo_a_device_or_a_foreign_file(tmp_path):
    src = tmp_path / "released.json"
    src.write_text(json.dumps(released_doc(2)))
    table = tmp_path / "t.csv"
    labelled_table(table, ("0", "1"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    mine = tmp_path / "mine.csv"
    mine.write_text("precious,data\n1,2\n")
    run = fake_run(tmp_path / "ags" / "csv" / "r", "ags")
    before = digest(tmp_path)
    for target, extra, words in ((table, [], "input"), (table, ["--overwrite"], "input"), (src, ["--overwrite"], "input"),
                                 (fifo, [], "FIFO"), (Path(os.devnull), [], "device"), (tmp_path, [], "folder"),
                                 (mine, [], "already exists"), (mine, ["--overwrite"], "not an earlier output"),
                                 (run / "p.csv", [], "inside the finished run")):
        code, out, err = main_in_process("predict", str(src), "--input", str(table), "--output", str(target), *extra)
        assert code == 2 and one_line(err).startswith("certdp: error: --output: ") and words in err, (target, err)
    assert digest(tmp_path) == before and fifo.is_fifo()
    out = tmp_path / "p.csv"
    assert main_in_process("predict", str(src), "--input", str(table), "--output", str(out))[0] == 0
    assert main_in_process("predict", str(src), "--input", str(table), "--output", str(out))[0] == 2
    assert main_in_process("predict", str(src), "--input", str(table), "--output", str(out), "--overwrite")[0] == 0
    assert len(pd.read_csv(out)) == 50


def test_predict_refuses_header_only_duplicate_columns_and_unfinished_runs(tmp_path):
    src = tmp_path / "released.json"
    src.write_text(json.dumps(released_doc(1)))
    (tmp_path / "header.csv").write_text("a,b,y\n")
    (tmp_path / "dup.csv").write_text("a,b,a,y\n1,2,3,0\n")
    (tmp_path / "badlabel.csv").write_text("a,b,y\n1,2,0\n1,2,1.5\n")
    for name, words in (("header.csv", "no data rows"), ("dup.csv", "names 2 columns"),
                        ("badlabel.csv", "outside the run's classes")):
        code, _, err = main_in_process("predict", str(src), "--input", str(tmp_path / name))
        assert code == 2 and one_line(err).startswith("certdp: error: --input: ") and words in err, err
    staging = tmp_path / f"r{results.INCOMPLETE}1-ab"
    staging.mkdir()
    (staging / "released.json").write_text(json.dumps(released_doc(1)))
    for source in (staging, staging / "released.json"):
        code, _, err = main_in_process("predict", str(source), "--input", str(tmp_path / "header.csv"))
        assert code == 2 and one_line(err).startswith("certdp: error: RUN_DIR: ") and "unfinished" in err
