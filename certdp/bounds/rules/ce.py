"""The bound rules of the softmax cross-entropy (ce): CROWN's general single-layer relaxation (from
the loss's linear gradient bounds, :class:`certdp.losses.SoftmaxCE`) and crowntt's head neurons;
the MILP windows do not bound it."""

from __future__ import annotations

from certdp.bounds.base import LOSS_RULES, LossRule
from certdp.bounds.crowntt_neurons import HeadNeurons

LOSS_RULES["ce"] = LossRule("ce", crowntt_neurons=HeadNeurons)
