#!/usr/bin/python3
"""Tests of the twin's optimiser settings, LR schedule, β1 cycling and EMA (wg-model.md §9.4, §10, App. B 5).

Owns: the lr and β1 used by optimiser steps 0, 1, 511, 512, 513, 514, 130561,
130562, 131071 for the defaults against the closed forms of §10.3; AdamW
(β1, β2, eps) from κ; the short-run adjustment (§10.2); lr scaling policies;
the linear-warmup endpoints of the errata; the EMA β at steps 0, 1, 11, 12 and
one EMA update; the "skip on non-finite gradients" optimiser step.
"""
import math
import os
import sys
import unittest
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_schedule as S  # noqa: E402

W, D, CD = 512, 130048, 512
LR_START, LR_MAX = 1e-6, 5e-5


def traj(cfg, steps, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch warns about scheduler.step() before optimizer.step()
        return S.lr_beta1_trajectory(cfg, steps, **kw)


class ScheduleTests(unittest.TestCase):
    def test_appendix_b_defaults(self):
        cfg = dict(S.DEFAULTS)
        self.assertEqual(S.step_counts(cfg), (131072, W, D, CD))
        steps = [0, 1, 511, 512, 513, 514, 130561, 130562, 131071]
        t = traj(cfg, steps)
        cos_lr = lambda s: LR_MAX + (LR_START - LR_MAX) * (1 + math.cos(math.pi * s / 511)) / 2  # noqa: E731
        cos_b1 = lambda s: 0.85 + 0.05 * (1 + math.cos(math.pi * s / 511))  # noqa: E731
        want = {0: (LR_START ** 2 / LR_MAX, 0.95), 1: (cos_lr(1), cos_b1(1)), 511: (LR_MAX, 0.85),
                130561: (LR_MAX, None), 130562: (LR_MAX * (1 - 1 / CD), None),
                131071: (LR_MAX * (1 - (131071 - 130561) / CD), None), 514: (LR_MAX, None)}
        for s, (lr, b1) in want.items():
            self.assertAlmostEqual(t[s][0] / lr, 1.0, places=9, msg=f"lr at step {s}")
            if b1 is not None:
                self.assertAlmostEqual(t[s][1], b1, places=12, msg=f"β1 at step {s}")
        # 512, 513: OneCycle phase 2 at pct ≈ 0: just below lr_max', β1 just above 0.85
        for s in (512, 513):
            pct = (s - 511) / (W + D - 511)
            lr = 1e-6 ** 2 / 1e-6 + (LR_MAX - LR_START ** 2 / LR_START) * (1 + math.cos(math.pi * pct)) / 2
            self.assertAlmostEqual(t[s][0] / lr, 1.0, places=9, msg=f"lr at {s}")
            self.assertAlmostEqual(t[s][1], 0.95 + (0.85 - 0.95) * (1 + math.cos(math.pi * pct)) / 2, places=12)
            self.assertLess(t[s][0], LR_MAX)
        # β1 frozen after 513 (OneCycle never stepped again)
        self.assertEqual(t[514][1], t[513][1])
        self.assertEqual(t[131071][1], t[513][1])

    def test_adamw_hparams(self):
        self.assertEqual(S.adamw_hparams(1), (0.975, 0.9875, 2e-8))
        b1, b2, eps = S.adamw_hparams(4)
        self.assertAlmostEqual(b1, 0.9)
        self.assertAlmostEqual(b2, 0.95)
        self.assertAlmostEqual(eps, 1e-8)
        self.assertEqual(S.adamw_hparams(40)[0], 0.5)
        with self.assertRaises(ValueError):
            S.adamw_hparams(81)
        opt = S.make_optimizer([torch.nn.Parameter(torch.zeros(1))], S.DEFAULTS)
        g = opt.param_groups[0]
        self.assertEqual((g["lr"], g["betas"], g["eps"], g["weight_decay"]), (1e-6, (0.975, 0.9875), 2e-8, 0.1))

    def test_short_run_and_scaling(self):
        cfg = dict(S.DEFAULTS, num_mini_epochs=1, samples_per_mini_epoch=1000)
        self.assertEqual(S.step_counts(cfg), (1000, 100, 850, 50))
        self.assertEqual(S.step_counts(dict(S.DEFAULTS), world_size=4), (32768, W, 32768 - 1024, CD))
        self.assertEqual(S.step_counts(dict(S.DEFAULTS, batch_size_per_gpu=3)), (1365 * 32, W, 1365 * 32 - 1024, CD))
        t = traj(cfg, [0, 100, 101, 950, 999])
        self.assertAlmostEqual(t[0][0], 2e-8)
        self.assertAlmostEqual(t[100][0], LR_MAX)
        self.assertAlmostEqual(t[101][0] / LR_MAX, 1.0, places=4)              # OneCycle phase 2, pct ≈ 0
        self.assertAlmostEqual(t[950][0], LR_MAX)
        self.assertAlmostEqual(t[999][0] / (LR_MAX * (1 - 48 / 50)), 1.0, places=9)
        self.assertAlmostEqual(S.lr_scale("sqrt", 2, 2), 2.0)
        self.assertEqual((S.lr_scale("linear", 2, 3), S.lr_scale("const", 2, 3)), (6.0, 1.0))
        t = traj(dict(S.DEFAULTS, lr_scaling_policy="linear", batch_size_per_gpu=2), [600])
        self.assertAlmostEqual(t[600][0], 2 * LR_MAX)

    def test_linear_warmup_errata(self):
        cfg = dict(S.DEFAULTS, lr_policy_warmup="linear")
        s = LR_START / LR_MAX
        t = traj(cfg, [0, W, W + 1, W + 2])
        self.assertAlmostEqual(t[0][0] / (LR_START * s * s), 1.0, places=9)   # lr_start·s²
        self.assertAlmostEqual(t[W][0] / (LR_START * s), 1.0, places=9)       # ... rises to lr_start·s
        self.assertAlmostEqual(t[W + 1][0] / (LR_START * s), 1.0, places=9)   # i = W still steps warmup
        self.assertAlmostEqual(t[W + 2][0], LR_MAX)                           # constant decay lifts it
        self.assertEqual(t[W][1], 0.975)                                       # κ-based β1 stays

    def test_ema(self):
        cfg = dict(S.DEFAULTS)
        betas = [S.ema_beta(i, cfg) for i in (0, 1, 11, 12)]
        self.assertEqual(betas[0], 0.0)
        self.assertAlmostEqual(betas[1], 0.5 ** (1 / 0.09), places=12)
        self.assertAlmostEqual(betas[2], 0.5 ** (1 / 0.99), places=12)
        self.assertEqual(betas[3], 0.5)
        m = torch.nn.Linear(2, 1)
        ema = S.EMA(m, cfg)
        with torch.no_grad():
            m.weight.add_(1.0)
        self.assertEqual(ema.update(m), 0.0)                                    # step 0: copy
        self.assertTrue(torch.equal(ema.shadow["weight"], m.weight))
        w_old = m.weight.detach().clone()
        with torch.no_grad():
            m.weight.add_(1.0)
        b = ema.update(m)
        self.assertTrue(torch.allclose(ema.shadow["weight"], w_old + (1 - b) * 1.0))

    def test_optimizer_step_skips_non_finite(self):
        cfg = dict(S.DEFAULTS)
        m = torch.nn.Linear(3, 1)
        opt = S.make_optimizer(m.parameters(), cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sched = S.LearningRateScheduler(opt, cfg)
        ema = S.EMA(m, cfg)
        m(torch.ones(1, 3)).sum().backward()
        m.bias.grad[0] = float("inf")
        w0 = m.weight.detach().clone()
        self.assertFalse(S.optimizer_step(m, opt, sched, ema, 1.0))
        self.assertTrue(torch.equal(m.weight, w0))
        self.assertEqual((sched.i, ema.istep), (1, 1))                          # schedule and EMA still step
        m.zero_grad()
        (100 * m(torch.ones(1, 3))).sum().backward()
        self.assertTrue(S.optimizer_step(m, opt, sched, ema, 1.0))
        norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in m.parameters()))
        self.assertAlmostEqual(norm, 1.0, places=5)                             # clipped to grad_clip
        self.assertFalse(torch.equal(m.weight, w0))


if __name__ == "__main__":
    unittest.main()
