"""One module of bound rules per loss (``mse``, ``hinge``, ``ce``), as auto_LiRPA keeps one bound
rule per operator: what an engine does differently for a loss lives beside the other rules of
that loss, registered as a :class:`certdp.bounds.base.LossRule` in
:data:`certdp.bounds.base.LOSS_RULES` (engines call :func:`certdp.bounds.base.loss_rule`).
Importing :mod:`certdp.bounds` imports this package, so every rule is registered before an
engine runs.  Adding a loss with special rules: one module here and one line below."""

from certdp.bounds.rules import ce, hinge, mse

__all__ = ["ce", "hinge", "mse"]
