"""The installable package: ``certdp --version``, and a wheel that carries the configs and the
experiment files (``certdp/_configs``, ``certdp/_experiments``) beside every module of ``certdp/``.

The wheel is built offline (``--no-build-isolation``: the dev extra brings setuptools) from a copy
of the tree in a temporary folder, so the checkout gets no ``build/`` or ``*.egg-info``.  The full
install-and-run check in a fresh venv is ``.ci/wheel-check`` (CI runs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import certdp
from certdp import cli
from certdp.settings.base import shipped_dir

ROOT = Path(__file__).resolve().parent.parent


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as e:
        sys.argv, old = ["certdp", "--version"], sys.argv
        try:
            cli.main()
        finally:
            sys.argv = old
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"certdp {certdp.__version__}"


def test_shipped_dirs_follow_the_environment_then_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CONFIG_DIR", str(tmp_path))
    assert shipped_dir("configs", "CERTDP_CONFIG_DIR") == tmp_path
    monkeypatch.delenv("CERTDP_CONFIG_DIR")
    found = shipped_dir("configs", "CERTDP_CONFIG_DIR")
    assert (found / "agtr.yaml").is_file()
    with pytest.raises(RuntimeError, match="cannot find its nothing/ folder"):
        shipped_dir("nothing", "CERTDP_NO_SUCH_VARIABLE")


@pytest.mark.slow
def test_wheel_holds_every_module_config_and_experiment(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / f, src / f)
    for d in ("certdp", "configs", "experiments"):
        shutil.copytree(ROOT / d, src / d, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", ".", "-w", str(tmp_path / "dist")],
                          cwd=src, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "license" not in proc.stderr.lower(), proc.stderr[-2000:]      # no setuptools license warning
    (whl,) = (tmp_path / "dist").glob("certdp-*.whl")
    assert whl.name.startswith(f"certdp-{certdp.__version__}-")
    names = set(zipfile.ZipFile(whl).namelist())
    want = {p.relative_to(ROOT).as_posix() for p in (ROOT / "certdp").rglob("*.py")}
    want |= {"certdp/_configs/" + p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    want |= {"certdp/_experiments/" + p.name for p in (ROOT / "experiments").glob("*.yaml")}
    assert want - names == set(), f"missing from the wheel: {sorted(want - names)[:10]}"
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in names)
    meta = next(n for n in names if n.endswith("dist-info/METADATA"))
    text = zipfile.ZipFile(whl).read(meta).decode()
    head = text.split("\n\n", 1)[0].splitlines()
    assert "License-Expression: MIT" in head
    torch_req = [h for h in head if h.startswith("Requires-Dist: torch")]
    assert torch_req and "<2.14" in torch_req[0] and ">=2.4" in torch_req[0], torch_req   # a range, not a pin


def test_the_listed_packages_are_every_package_of_the_tree():
    """pyproject lists its packages (configs/ and experiments/ ship under certdp._configs): a new
    subpackage left off the list is missing from the wheel (certdp.agt, certdp.commands and
    certdp.bounds.rules were, and the installed `certdp` failed on its first import)."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    have = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "certdp").rglob("__init__.py")}
    have |= {"certdp._configs" + "".join("." + q for q in d.relative_to(ROOT / "configs").parts)
             for d in [ROOT / "configs", *(p for p in (ROOT / "configs").rglob("*") if p.is_dir())]}
    assert have - listed == set() and listed - have - {"certdp._experiments"} == set()
