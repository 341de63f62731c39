"""Engines are built from settings when the run starts (settings hold names and options only),
and an engine option the chosen engine does not read is refused in one line, never dropped."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from certdp.errors import ConfigError
from certdp.settings import config_dir
from certdp.settings.compose import compose_and_parse


def _settings(command: str, overrides: list[str]):
    import certdp.cli  # noqa: F401  (registers the ${certdp.*:} resolvers of configs/base.yaml)
    (st,) = compose_and_parse(command, overrides, multirun=False, config_path=str(config_dir()),
                              config_name=command)
    return st


def test_settings_hold_names_and_options_and_build_a_fresh_engine():
    cert = _settings("agtr", ["dataset=linear", "certificate=milp", "certificate.frequency=2"]).certificate
    assert [f.name for f in dataclasses.fields(cert)] == ["name", "options", "ignored"]   # no live engine inside
    a, b = cert.build(), cert.build()
    assert a is not b and a.name == b.name == "milp" and a.window_steps == 2


def test_a_presets_option_for_another_engine_is_set_aside():
    # preset/ags/blobs prepares certificate.run_time_limit for milp; certificate=auto picks ibp
    cert = _settings("ags", ["dataset=blobs"]).certificate
    assert cert.name == "ibp" and cert.ignored == ("run_time_limit",) and "run_time_limit" not in dict(cert.options)
    assert _settings("ags", ["dataset=blobs", "certificate=milp"]).certificate.option("run_time_limit") == 600


@pytest.mark.parametrize("overrides,key", [
    (["certificate=ibp", "+certificate.frequency=4"], "certificate.frequency"),        # milp's option, explicit
    (["dataset=blobs", "certificate.run_time_limit=5"], "certificate.run_time_limit"),  # preset's key, explicit
    (["+certificate.frobnicate=1"], "certificate.frobnicate"),                         # no engine reads it
])
def test_an_explicit_option_the_engine_does_not_read_is_refused(overrides, key):
    with pytest.raises(ConfigError) as e:
        _settings("ags", overrides)
    assert e.value.key == key and "allowed" in e.value.message and "aggregation, substitutions" in e.value.message


@pytest.mark.slow          # 3-20 s on 2 cores: the slow tier (make test stays under 90 s)
def test_the_cli_refuses_a_planted_unknown_option_in_one_line(tmp_path):
    env = {**os.environ, "CERTDP_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-m", "certdp.cli", "agtr", "dataset=linear", "certificate=ibp",
                        "+certificate.time_limit=5", f"out_root={tmp_path}"], capture_output=True, text=True,
                       env=env, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("certdp: error: certificate.time_limit: not an option of the certificate 'ibp'")
    assert "; allowed: aggregation, substitutions (the options of ibp)" in lines[0]
    assert not any(tmp_path.rglob("*.csv"))
