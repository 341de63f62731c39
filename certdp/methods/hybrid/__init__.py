"""SST-2 hybrid (paper S5.3 and its settings table): a DP-LoRA encoder with an AGS head.

Pipeline, for a total budget (eps, delta) with delta >= delta_1 + delta_2 (5e-6 each by default):

1. **DP-LoRA** (:mod:`.lora`): LoRA adapters and a linear head fine-tuned by DP-SGD to
   (eps_1, delta_1).  Scored with its own head, the fine-tuned model is the **end-to-end
   DP-LoRA** arm.
2. **AGS head** (:mod:`.heads`): the adapted encoder (already (eps_1, delta_1)-DP, so what
   follows is post-processing of it plus the head release) embeds the private, public and test
   sentences; a logistic head on PCA features is certified by AGT and released once at
   (eps_2, delta_2) (``laplace_p``) or pure eps_2 (``cauchy_p``).  By basic composition the
   pipeline is (eps_1 + eps_2, delta_1 + delta_2)-DP.
3. **Frozen-encoder arms**: the un-adapted encoder (public weights, no privacy cost) with the
   same AGS head at the whole (eps, delta), and with a DP-SGD head at the whole (eps, delta).

Chosen on the public set (the GLUE dev sentences), as in the paper: the split eps_1 = f * eps
(``split.fractions``; with ``split.reuse_end_to_end`` the end-to-end adapters of smaller budgets
are candidates too), the allocation, the DP-SGD head's learning rate and every arm's decision
threshold on the logit margin.  Choosing among several private candidates by their public
accuracy is the paper's protocol; its own privacy cost (Papernot & Steinke 2022) is not
accounted here: a single fraction and allocation gives the strict (eps, delta) guarantee.

The data are the ``sst2`` dataset's split (:mod:`.data`); every unit of work is resumable from
``hybrid.work_dir`` (:mod:`.store`).  Modules: :mod:`certdp.settings.hybrid` (the configuration),
:mod:`.data`, :mod:`.encoder`, :mod:`.lora`, :mod:`.heads`, :mod:`.runner` (:func:`run`).
"""

from certdp.methods.hybrid.runner import run

__all__ = ["run"]
