"""Optimiser, learning-rate schedule, clipping and EMA of the WeatherGenerator twin (§9.4, §10).

Owns: AdamW hyper-parameters from κ = batch_size·world (§10.1); the step counts
with the short-run adjustment (§10.2); upstream's LearningRateScheduler, built the
way upstream builds it, from torch's own OneCycleLR / LinearLR / ExponentialLR on
the optimiser, so that the construction artefacts come out by themselves: the
cooldown LinearLR multiplies the lr at construction (step 0 uses
lr_start²/lr_max'), OneCycleLR drives AdamW's β1 (cycle_momentum) and freezes it
after warmup (§10.3, §13.5, §13.6); the EMA β (§9.4, §13.7); one optimiser step
with clipping and "skip on non-finite gradients" (§10.4).

Open points: decay "sqrt" is written as lr = lr_max'·√W/√i with i the
scheduler's own step counter (the spec gives only the formula); cooldown
"cosine" is not specified and raises; lr_scaling_policy "none" is read as
"const".
"""
import math

import torch

DEFAULTS = {"lr_start": 1e-6, "lr_max": 5e-5, "lr_final_decay": 1e-6, "lr_final": 0.0,
            "lr_steps_warmup": 512, "lr_steps_cooldown": 512, "lr_policy_warmup": "cosine",
            "lr_policy_decay": "constant", "lr_policy_cooldown": "linear", "lr_scaling_policy": "sqrt",
            "grad_clip": 1.0, "weight_decay": 0.1, "num_mini_epochs": 32, "samples_per_mini_epoch": 4096,
            "batch_size_per_gpu": 1, "ema_ramp_up_ratio": 0.09, "ema_halflife_in_thousands": 1e-3}


def adamw_hparams(kappa):
    """§10.1: (β1, β2, eps) from κ = batch_size_per_gpu · world_size."""
    beta2 = 1.0 - 0.0125 * kappa
    if beta2 < 0.0:
        raise ValueError(f"κ = {kappa} > 80 gives β2 < 0 (AdamW would raise)")
    return max(0.5, 1.0 - 0.025 * kappa), beta2, 2e-8 / math.sqrt(kappa)


def step_counts(cfg, world_size=1, num_windows=None):
    """§10.2: (lr_steps, warmup, decay, cooldown) per rank."""
    B = int(cfg["batch_size_per_gpu"])
    n = int(cfg["samples_per_mini_epoch"]) if num_windows is None else min(num_windows, int(cfg["samples_per_mini_epoch"]))
    len_dataset = ((n // world_size) // B) * B
    lr_steps = int(len_dataset * int(cfg["num_mini_epochs"]) / B)
    W, Cd = int(cfg["lr_steps_warmup"]), int(cfg["lr_steps_cooldown"])
    D = lr_steps - W - Cd
    if D < int(0.2 * lr_steps):
        W, Cd = int(0.1 * lr_steps), int(0.05 * lr_steps)
        D = lr_steps - W - Cd
    return lr_steps, W, D, Cd


def lr_scale(policy, batch_size, world_size):
    n = batch_size * world_size
    return {"sqrt": math.sqrt(n), "linear": float(n), "const": 1.0, "none": 1.0}[policy]


class LearningRateScheduler:
    """Upstream's scheduler (§10.3); call step() once after every optimiser step."""

    def __init__(self, optimizer, cfg, world_size=1, num_windows=None):
        self.opt = optimizer
        B = int(cfg["batch_size_per_gpu"])
        _, W, D, Cd = step_counts(cfg, world_size, num_windows)
        self.W, self.D, self.Cd = W, D, Cd
        s_lr = lr_scale(cfg["lr_scaling_policy"], B, world_size)
        lr_start, lr_final = float(cfg["lr_start"]), float(cfg["lr_final"])
        self.lr_max = s_lr * float(cfg["lr_max"])
        lr_fd = s_lr * float(cfg["lr_final_decay"])
        self.pol_w, self.pol_d, self.pol_c = cfg["lr_policy_warmup"], cfg["lr_policy_decay"], cfg["lr_policy_cooldown"]
        S = torch.optim.lr_scheduler
        # 1. warmup (constructors touch the optimiser, in this order)
        if self.pol_w == "cosine":
            self.warmup = S.OneCycleLR(optimizer, max_lr=self.lr_max, total_steps=W + D + 1,
                                       pct_start=W / (W + D + 1), div_factor=self.lr_max / lr_start,
                                       final_div_factor=lr_fd / lr_start)
        elif self.pol_w == "linear":
            self.warmup = S.LinearLR(optimizer, start_factor=lr_start / self.lr_max, end_factor=1.0, total_iters=W)
        else:
            raise NotImplementedError(f"lr_policy_warmup {self.pol_w}")
        # 2. decay
        if self.pol_d == "constant":
            self.decay = None
        elif self.pol_d == "linear":
            self.decay = S.LinearLR(optimizer, start_factor=1.0, end_factor=lr_fd / self.lr_max, total_iters=D)
        elif self.pol_d == "exponential":
            self.decay = S.ExponentialLR(optimizer, gamma=(lr_fd / self.lr_max) ** (1.0 / D))
        elif self.pol_d == "cosine":
            if self.pol_w != "cosine":
                raise ValueError("lr_policy_decay cosine requires a cosine warmup")
            self.decay = self.warmup           # continues the same OneCycleLR
        elif self.pol_d == "sqrt":
            self.decay = "sqrt"
        else:
            raise NotImplementedError(f"lr_policy_decay {self.pol_d}")
        # 3. cooldown
        if self.pol_c != "linear":
            raise NotImplementedError(f"lr_policy_cooldown {self.pol_c} (not in the spec)")
        end = lr_final / float(cfg["lr_final_decay"]) if float(cfg["lr_final_decay"]) != 0 else 0.0
        self.cooldown = S.LinearLR(optimizer, start_factor=lr_start / self.lr_max, end_factor=end, total_iters=Cd)
        self.cur = self.warmup
        self.i = 0

    def _set_lr(self, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self):
        i, W, D, Cd = self.i, self.W, self.D, self.Cd
        if i < W + D + Cd:
            if W < i <= W + D and self.pol_d == "constant":
                if self.opt.param_groups[0]["lr"] < self.lr_max:
                    self._set_lr(self.lr_max)
            elif W < i <= W + D and self.decay == "sqrt":
                self._set_lr(self.lr_max * math.sqrt(W) / math.sqrt(i))
            elif self.cur is not None:
                self.cur.step()
            if i == W:
                self.cur = self.decay if self.decay != "sqrt" else None
            if i == W + D:
                self.cur = self.cooldown
        self.i += 1


def make_optimizer(params, cfg, world_size=1):
    """AdamW of §10.1 (one group, weight decay on everything)."""
    kappa = int(cfg["batch_size_per_gpu"]) * world_size
    b1, b2, eps = adamw_hparams(kappa)
    return torch.optim.AdamW(params, lr=float(cfg["lr_start"]), betas=(b1, b2), eps=eps,
                             weight_decay=float(cfg["weight_decay"]))


def lr_beta1_trajectory(cfg, steps, world_size=1, num_windows=None):
    """[(lr, β1)] used by optimiser steps 0 .. max(steps); returns {step: (lr, β1)} for `steps`."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = make_optimizer([p], cfg, world_size)
    sched = LearningRateScheduler(opt, cfg, world_size, num_windows)
    want, out = set(steps), {}
    for t in range(max(steps) + 1):
        if t in want:
            g = opt.param_groups[0]
            out[t] = (g["lr"], g["betas"][0])
        sched.step()
    return out


def ema_beta(istep, cfg, world_size=1):
    """§9.4: β of the EMA update after optimiser step istep (istep before its increment)."""
    N = int(cfg["batch_size_per_gpu"]) * world_size
    cur = istep * N
    h = min(float(cfg["ema_halflife_in_thousands"]), cur / 1000.0 * float(cfg["ema_ramp_up_ratio"]))
    return 0.5 ** (N / max(1000.0 * h, 1e-6))


class EMA:
    """A copy of the parameters updated p_ema <- lerp(p_ema, p, 1 - β) after every step."""

    def __init__(self, model, cfg, world_size=1):
        self.cfg, self.world = cfg, world_size
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.istep = 0

    @torch.no_grad()
    def update(self, model):
        beta = ema_beta(self.istep, self.cfg, self.world)
        for n, p in model.named_parameters():
            self.shadow[n].lerp_(p.detach(), 1.0 - beta)
        self.istep += 1
        return beta


def optimizer_step(model, opt, sched, ema, grad_clip):
    """After backward: clip, AdamW unless a gradient is non-finite, then schedule and EMA (§10.4)."""
    params = [p for p in model.parameters() if p.grad is not None]
    finite = all(torch.isfinite(p.grad).all() for p in params)
    if finite:
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, max_norm=grad_clip)
        opt.step()
    sched.step()
    if ema is not None:
        ema.update(model)
    return finite
