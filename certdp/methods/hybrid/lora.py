"""DP-LoRA fine-tuning of the sentence encoder (the hybrid's first stage, eps_1).

Rank-r LoRA adapters (``peft``) on the query and value projections of every attention layer,
plus a linear classification head on the pooled embedding, trained by the project's one
Poisson-sampled DP-SGD loop (:func:`certdp.privacy.dpsgd_core.dpsgd_steps`): sampling rate
q = B/N, per-sample gradients of all trainable tensors from Opacus' ``GradSampleModule`` (hooks
mode, which covers the LoRA ``nn.Linear`` factors), clipped jointly to l2 norm ``dpsgd.clip``,
summed, plus N(0, sigma^2 clip^2) per coordinate, divided by q N; AdamW applies the step.  sigma
is the smallest noise multiplier for which the accountant (``dpsgd.accountant``) certifies
(eps_1, ``dpsgd.delta``) after T = epochs / q steps.

Resume: each step's batch and noise come from a generator seeded by (seed, adapter key, step),
and a checkpoint (trainable tensors, AdamW state, step) is written every
``dpsgd.checkpoint_every`` steps, so an interrupted fine-tune resumed from its checkpoint ends
with the same adapter as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from certdp.data.text import TextPart
from certdp.seeding import generator_for
from certdp.methods.hybrid.encoder import Adapter, LoraClassifier, micro_batches, pad
from certdp.settings.hybrid import HybridSettings
from certdp.methods.hybrid.store import digest, load_json, load_torch, save_json, save_torch
from certdp.privacy.dpsgd_core import calibrated_noise, clip_factors, dpsgd_steps, poisson_schedule

log = logging.getLogger("certdp")


def finetune(s: HybridSettings, folder: Path, train: TextPart, eps1: float, *, progress: bool) -> Adapter:
    """DP-LoRA fine-tuning on ``train`` to (eps1, ``dpsgd.delta``); resumable (module docstring)."""
    d = s.dpsgd
    n = len(train.texts)
    B, q, T = poisson_schedule(batch_size=d.batch_size, epochs=d.epochs, n=n)
    key = digest("dplora", s.encoder, folder.name, s.max_seq_length, s.lora, d, eps1, n,
                 s.n_test, s.seed, hashlib.sha256("\n".join(train.texts).encode()).hexdigest())
    wdir = s.work_dir / "adapters" / key
    final = wdir / "adapter.pt"
    if final.exists():
        log.info("DP-LoRA eps1=%g N=%d: finished adapter %s (cached)", eps1, n, key)
        return Adapter(key, final, eps1, load_json(wdir / "meta.json"))
    sigma, eps_cert = calibrated_noise(epsilon=eps1, delta=d.delta, sample_rate=q, steps=T, accountant=d.accountant)
    from opacus import GradSampleModule        # optional extra: imported only to fine-tune
    net = LoraClassifier(folder, s.lora, s.seed)
    params = net.trainable()
    opt = torch.optim.AdamW(params.values(), lr=d.lr, weight_decay=0.0)
    ckpt = wdir / "checkpoint.pt"
    start = 0
    if ckpt.exists():
        st = load_torch(ckpt)
        net.load_state_dict(st["trainable"], strict=False)
        opt.load_state_dict(st["optimizer"])
        start = int(st["step"])
        log.info("DP-LoRA eps1=%g N=%d: resuming %s at step %d/%d", eps1, n, key, start, T)
    gsm = GradSampleModule(net, batch_first=True, loss_reduction="sum")
    gsm.train()
    toks = net.tokenize(train.texts, s.max_seq_length)
    lens = np.asarray([len(t) for t in toks])
    y = torch.as_tensor(train.y01)
    n_trainable = sum(p.numel() for p in params.values())
    log.info("DP-LoRA eps1=%g (delta1=%g): N=%d, B=%d (q=%.4f), T=%d steps, sigma=%.4f (%s eps %.4f), "
             "%d trainable params", eps1, d.delta, n, B, q, T, sigma, d.accountant, eps_cert, n_trainable)

    def clipped_grad_sum(idx: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
        torch.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=gen)))   # LoRA dropout, if any
        total = {k: torch.zeros_like(p) for k, p in params.items()}
        for mb in micro_batches(idx.numpy(), lens, d.physical_tokens) if len(idx) else []:
            ids, mask = pad([toks[i] for i in mb], net.pad_id)
            torch.nn.functional.cross_entropy(gsm(ids, mask), y[mb], reduction="sum").backward()
            gs = {k: p.grad_sample for k, p in params.items()}
            norms = torch.sqrt(sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in gs.values()))
            factor = clip_factors(norms, d.clip)
            for k, v in gs.items():
                total[k] += torch.einsum("i,i...->...", factor, v)
            for p in params.values():
                p.grad_sample = None
                p.grad = None
        return total

    def apply_update(noisy: dict[str, torch.Tensor], expected_batch: float) -> None:
        for k, p in params.items():
            p.grad = noisy[k] / expected_batch
        opt.step()
        opt.zero_grad(set_to_none=True)

    bar = tqdm(total=T, initial=start, desc=f"DP-LoRA eps1={eps1:g}", disable=not progress, leave=False)

    def after_step(done: int) -> None:
        bar.update(1)
        if done % d.checkpoint_every == 0 and done < T:
            save_torch({"step": done, "trainable": {k: p.detach().clone() for k, p in params.items()},
                        "optimizer": opt.state_dict()}, ckpt)

    t0 = time.perf_counter()
    dpsgd_steps(n=n, steps=T, sample_rate=q, clip=d.clip, sigma=sigma, clipped_grad_sum=clipped_grad_sum,
                apply_update=apply_update, generator_at=lambda t: generator_for(s.seed, "dplora-step", key, t),
                start=start, after_step=after_step)
    bar.close()
    gsm._close()
    meta = {"eps1": eps1, "eps1_certified": eps_cert, "delta1": d.delta, "sigma": sigma, "steps": T,
            "sample_rate": q, "batch_size": B, "n_private": n, "accountant": d.accountant,
            "seconds": time.perf_counter() - t0, "targets": net.targets, "trainable": n_trainable}
    save_json(meta, wdir / "meta.json")
    save_torch({k: p.detach().clone() for k, p in params.items()}, final)     # written last: marks completion
    if ckpt.exists():
        ckpt.unlink()
    log.info("DP-LoRA eps1=%g done in %.0f s", eps1, meta["seconds"])
    return Adapter(key, final, eps1, meta)
