"""Reading back the documents certdp wrote (a run's ``config.yaml`` and ``run.json``, an AGS run's
``released.json``) without trusting them: each reader refuses, in one line naming the key and the
file, what would crash or stall a parser before the parser sees it.

* a path that is not a regular file (a folder, a FIFO that would block, a device);
* a file above a size cap (read fully into memory otherwise);
* binary or non-UTF-8 bytes (a NUL byte, an invalid sequence);
* nesting deeper than :data:`MAX_DEPTH` (recursive parsers raise ``RecursionError`` at ~1,000
  levels; certdp's own documents nest 5 deep);
* YAML aliases (``*name``) in files certdp writes (it never writes them), and in hand-written
  files (experiment files) aliases that expand beyond a million nodes: a few lines of nested
  aliases expand to billions ("billion laughs"); YAML tags other than the safe ones.

The value returned is plain data (dicts, lists, strings, numbers); its schema is checked by the
caller (:mod:`certdp.settings.record`, :mod:`certdp.certify.released`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from certdp.errors import ConfigError

MAX_DEPTH = 64
MAX_YAML_BYTES = 4 << 20         # a resolved config is a few KiB
MAX_JSON_BYTES = 512 << 20       # released.json holds every released parameter vector
MAX_EXPANDED_NODES = 1_000_000   # a hand-written YAML file's nodes with its aliases expanded

_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def shown(path: Path) -> str:
    """A path as text on one line (control characters escaped)."""
    s = str(path)
    return s if s.isprintable() else repr(s)


def read_document_bytes(path: str | Path, *, key: str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; otherwise a :class:`ConfigError`
    under ``key`` saying what the path is and that ``what`` is allowed."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(key, f"{shown(p)} does not exist; allowed: {what}") from None
    except OSError as e:
        raise ConfigError(key, f"cannot read {shown(p)} ({e.strerror or e}); allowed: {what}") from None
    if p.is_dir():
        raise ConfigError(key, f"{shown(p)} is a folder; allowed: {what}")
    if not p.is_file():
        raise ConfigError(key, f"{shown(p)} is not a regular file (a FIFO or a device); allowed: {what}")
    if st.st_size > limit:
        raise ConfigError(key, f"{shown(p)} holds {st.st_size:,} bytes, more than certdp writes (at most "
                               f"{limit:,}); allowed: {what}")
    try:
        with p.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(key, f"cannot read {shown(p)} ({e.strerror or e}); allowed: {what}") from None
    if len(data) > limit:
        raise ConfigError(key, f"{shown(p)} holds more than {limit:,} bytes; allowed: {what}")
    return data


def _text(data: bytes, p: Path, key: str, what: str) -> str:
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(key, f"{shown(p)} is not a text file (a NUL byte at offset {nul}); allowed: {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(key, f"{shown(p)} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                               f"allowed: {what}") from None


def _expanded_size(node, memo: dict) -> int:
    """Nodes of a composed YAML graph once every alias is expanded (shared nodes counted per use)."""
    got = memo.get(id(node))
    if got is not None:
        return got
    import yaml
    if isinstance(node, yaml.MappingNode):
        n = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        n = 1
    memo[id(node)] = n
    return n


def read_yaml_document(path: str | Path, *, key: str, what: str, limit: int = MAX_YAML_BYTES,
                       aliases: bool = False) -> Any:
    """A YAML file as plain data, refusing deep nesting before building anything, and aliases
    (``aliases=False``: files certdp writes have none) or, for hand-written files
    (``aliases=True``), aliases whose expansion exceeds :data:`MAX_EXPANDED_NODES` nodes."""
    import yaml
    p = Path(path)
    text = _text(read_document_bytes(p, key=key, limit=limit, what=what), p, key, what)
    depth = 0
    try:
        # the event stream is produced without recursion and without expanding aliases
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, yaml.AliasEvent) and not aliases:
                raise ConfigError(key, f"{shown(p)} holds a YAML alias (*{ev.anchor}); certdp writes none, and "
                                       f"nested aliases expand without bound; allowed: {what}")
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError(key, f"{shown(p)} nests deeper than {MAX_DEPTH} levels; allowed: {what}")
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        if aliases:
            size = _expanded_size(yaml.compose(text, Loader=yaml.SafeLoader), {})
            if size > MAX_EXPANDED_NODES:
                raise ConfigError(key, f"{shown(p)} expands to {size:,} nodes through its YAML aliases; allowed: "
                                       f"{what} of at most {MAX_EXPANDED_NODES:,} nodes")
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        first = " ".join(str(e).split())[:160]
        raise ConfigError(key, f"{shown(p)} is not valid YAML ({first}); allowed: {what}") from None
    except RecursionError:                      # pragma: no cover - the depth guard comes first
        raise ConfigError(key, f"{shown(p)} nests too deeply; allowed: {what}") from None


def json_depth_exceeds(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """True when the JSON text ``data`` nests arrays and objects deeper than ``limit`` (brackets
    inside strings do not count); a linear scan that needs no recursion."""
    depth = 0
    for m in _JSON_TOKENS.finditer(data):
        c = m.group()[:1]
        if c in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif c in (b"]", b"}"):
            depth -= 1
    return False


def read_json_document(path: str | Path, *, key: str, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file as plain data (``NaN``/``Infinity`` read as floats: the caller's schema
    refuses non-finite values by field), refusing deep nesting before parsing."""
    p = Path(path)
    data = read_document_bytes(p, key=key, limit=limit, what=what)
    text = _text(data, p, key, what)
    if json_depth_exceeds(data):
        raise ConfigError(key, f"{shown(p)} nests deeper than {MAX_DEPTH} levels; allowed: {what}")
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigError(key, f"{shown(p)} is not valid JSON ({str(e).splitlines()[0][:100]}); allowed: {what}") from None
    except RecursionError:                      # pragma: no cover - the depth guard comes first
        raise ConfigError(key, f"{shown(p)} nests too deeply; allowed: {what}") from None
