"""The one registry helper: a table of named things (certificates, mechanisms, accountants,
datasets, losses, plots) that refuses a second entry under a name it already holds.

Why refuse: a plug-in or a test that reuses a name would otherwise silently replace the engine,
mechanism or accountant every later run looks up by that name -- a run would then certify or
account with code other than the code its settings name.  Registering the very same object again
(a module imported twice under one name) is harmless and allowed; removing an entry (``pop``,
``del``) is allowed, so a test can register a temporary entry and take it out again.
"""

from __future__ import annotations

from typing import Generic, Iterable, TypeVar

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """``name -> entry``, insertion-ordered, with ``kind`` (what its entries are, for messages).

    ``registry[name] = entry`` and :meth:`add` raise ``ValueError`` when ``name`` is held by another
    entry; everything else is a plain ``dict``."""

    def __init__(self, kind: str, entries: Iterable[tuple[str, T]] = ()):
        super().__init__()
        self.kind = kind
        for name, entry in entries:
            self[name] = entry

    def __setitem__(self, name: str, entry: T) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty name (got {name!r})")
        held = self.get(name)
        if held is not None and held is not entry:
            raise ValueError(f"duplicate {self.kind} name {name!r}: already registered to {held!r}; "
                             f"pick another name (or remove the old entry first)")
        super().__setitem__(name, entry)

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name`` and return it (so that it can end a decorator)."""
        self[name] = entry
        return entry

    def update(self, *args, **kw) -> None:
        for name, entry in dict(*args, **kw).items():
            self[name] = entry

    def setdefault(self, name: str, entry: T = None) -> T:
        if name not in self:
            self[name] = entry
        return self[name]

    def __ior__(self, other):
        self.update(other)
        return self

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self)})"
