#!/usr/bin/python3
"""Tests of the twin's optional activation recomputation (wg_pieces: model_pieces, resolve_plan; wg_model:
WGModel.set_recompute, torch.utils.checkpoint per piece).

Owns: the piece list against the C++ model's (same keys, same order rules), the
mode semantics (none, full, selective, every_n), that every listed piece is a
call site of the forward, and that recomputing gives the same loss and
gradients as keeping activations: in eval mode without dropout, and in train
mode with dropout (preserve_rng_state), on the synthetic two-stream batch and
with the forecast engine.
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_model  # noqa: E402
import wg_synth  # noqa: E402
from wg_layers import set_dropout  # noqa: E402
from wg_loss import compute_loss  # noqa: E402
from wg_model import WGModel  # noqa: E402
from wg_pieces import SECTIONS, model_pieces, resolve_plan  # noqa: E402
from wg_tables import Tables  # noqa: E402

MODES = [("full", 1), ("selective", 1), ("every_n", 2), ("every_n", 1), ("every_n", 3)]


def build(over=None, seed=0):
    torch.manual_seed(seed)
    cfg = wg_synth.small_config(over)
    model = WGModel(cfg)
    tables = {k: (v.to(torch.get_default_dtype()) if v.is_floating_point() else v)
              for k, v in Tables(cfg).as_dict().items()}
    batch = wg_synth.synthetic_batch(cfg, B=2, seed=seed)
    return cfg, model, tables, batch


def step(model, cfg, batch, tables, seed=None):
    """Loss and {name: grad} of one forward/backward (gradients reset first)."""
    if seed is not None:
        torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    preds = model(batch, tables)
    loss = compute_loss(cfg, batch, preds, train=True)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


class PieceTests(unittest.TestCase):
    def test_pieces_and_modes(self):
        cfg = wg_synth.small_config()
        keys = [str(p) for p in model_pieces(cfg)]
        self.assertEqual(keys[:6], ["embed.ERA5/input", "embed.ERA5/block0.attn", "embed.ERA5/block0.mlp",
                                    "embed.ERA5/block1.attn", "embed.ERA5/block1.mlp", "embed.ERA5/readout"])
        self.assertIn("ae_adapter/block1.cross", keys)
        self.assertEqual(keys[-1], "pred.OBS/head")
        self.assertNotIn("forecast/block0.attn", keys)  # no forecast engine in masking mode
        self.assertEqual(len(keys), 6 + 4 + 4 + 3 + 4 + 4 + (1 + 2 * 3 + 1) + (1 + 3 + 1))
        pieces = model_pieces(cfg)
        self.assertEqual(resolve_plan(pieces, "none"), set())
        self.assertEqual(resolve_plan(pieces, "full"), set(keys))
        sel = resolve_plan(pieces, "selective")
        self.assertEqual(sel, {k for k in keys if k.endswith(".attn") or k.endswith(".cross")})
        ev2 = resolve_plan(pieces, {s: ("every_n", 2) for s in SECTIONS})
        self.assertIn("ae_adapter/block0.cross", ev2)
        self.assertIn("ae_adapter/block0.mlp", ev2)
        self.assertNotIn("ae_adapter/block1.cross", ev2)
        self.assertIn("pred.ERA5/block0.mlp", ev2)
        self.assertNotIn("pred.ERA5/block1.cross", ev2)
        for k in ("embed.ERA5/input", "embed.ERA5/readout", "pred.ERA5/input", "pred.ERA5/head"):
            self.assertNotIn(k, ev2)  # outside blocks: full only
        one = resolve_plan(pieces, {"ae_global": "full"})
        self.assertEqual(one, {k for k in keys if k.startswith("ae_global/")})
        with self.assertRaises(ValueError):
            resolve_plan(pieces, "sometimes")
        model = WGModel(cfg)
        with self.assertRaises(ValueError):
            model.set_recompute({"ae_global/block9.attn"})

    def test_every_piece_is_a_call_site(self):
        for over in (None, wg_synth.FORECAST):
            cfg, model, tables, batch = build(over)
            model.set_recompute_mode("full")
            seen = []
            orig_run = model._run

            def recording(key, fn, *args):
                seen.append(key)
                return orig_run(key, fn, *args)
            model._run = recording
            step(model, cfg, batch, tables)
            self.assertEqual(set(seen), set(str(p) for p in model_pieces(cfg)), over)


class GradientTests(unittest.TestCase):
    def setUp(self):
        torch.set_default_dtype(torch.float64)

    def tearDown(self):
        torch.set_default_dtype(torch.float32)

    def same(self, ref, got, what, tol):
        loss_r, g_r = ref
        loss_g, g_g = got
        self.assertLessEqual(abs(float(loss_r) - float(loss_g)), tol * max(1.0, abs(float(loss_r))), what)
        self.assertEqual(set(g_r), set(g_g), what)
        for n in g_r:
            scale = max(1e-30, float(g_r[n].abs().max()))
            err = float((g_r[n] - g_g[n]).abs().max()) / scale
            self.assertLessEqual(err, tol, f"{what}: grads.{n} differs by {err:.3g} of its scale")

    def check_modes(self, over, train):
        cfg, model, tables, batch = build(over)
        if train:
            model.train()  # dropout as configured (the prediction engine's 0.1, the rates of the config)
        else:
            model.eval()
            set_dropout(model, 0.0)
        counting = {"calls": 0}
        real = wg_model._checkpoint

        def spy(fn, *args, **kw):
            counting["calls"] += 1
            self.assertFalse(kw.get("use_reentrant", True))
            self.assertTrue(kw.get("preserve_rng_state", False))
            return real(fn, *args, **kw)
        wg_model._checkpoint = spy
        try:
            model.set_recompute(set())
            ref = step(model, cfg, batch, tables, seed=7)
            self.assertEqual(counting["calls"], 0)
            for mode, n in MODES:
                model.set_recompute_mode({s: (mode, n) for s in SECTIONS})
                counting["calls"] = 0
                got = step(model, cfg, batch, tables, seed=7)
                self.assertGreater(counting["calls"], 0, mode)
                self.same(ref, got, f"{'train' if train else 'eval'} {mode} {n} {over and 'forecast'}", 1e-12)
            model.set_recompute(set())
            self.same(ref, step(model, cfg, batch, tables, seed=7), "off again", 0.0)
        finally:
            wg_model._checkpoint = real

    def test_eval_no_dropout(self):
        self.check_modes(None, train=False)

    def test_eval_no_dropout_forecast(self):
        self.check_modes(wg_synth.FORECAST, train=False)

    def test_train_with_dropout(self):
        over = {"embed_dropout_rate": 0.2, "ae_local_dropout_rate": 0.2, "ae_adapter_dropout_rate": 0.2,
                "ae_aggregation_dropout_rate": 0.2, "ae_global_dropout_rate": 0.2}
        self.check_modes(over, train=True)
        # and the dropout really draws: another seed gives another loss
        cfg, model, tables, batch = build(over)
        model.train()
        a, _ = step(model, cfg, batch, tables, seed=7)
        b, _ = step(model, cfg, batch, tables, seed=8)
        self.assertNotEqual(float(a), float(b))


if __name__ == "__main__":
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    unittest.main()
