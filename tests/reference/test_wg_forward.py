#!/usr/bin/python3
"""Tests of the twin's whole forward on the make-dump batch (wg_synth: level 2, two streams, B = 2).

Owns: the model against a naive Appendix-A forward with loops over cells
(B = 1, float64), B = 2 against two B = 1 runs (attention never mixes samples;
the loss is the mean of the samples' losses), the values of empty cells
(q_cells + 2·pe_global), and runs of the non-default paths (forecast engine with
AdaLN on the step, Local attention blocks, two query slots) with the same
per-sample check.
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_synth  # noqa: E402
import wg_testlib as N  # noqa: E402
from wg_layers import set_dropout  # noqa: E402
from wg_loss import compute_loss  # noqa: E402
from wg_model import WGModel  # noqa: E402
from wg_tables import Tables  # noqa: E402


def build(over=None, seed=0):
    torch.manual_seed(seed)
    cfg = wg_synth.small_config(over)
    model = WGModel(cfg)
    model.train()
    set_dropout(model, 0.0)
    tables = {k: (v.to(torch.get_default_dtype()) if v.is_floating_point() else v) for k, v in Tables(cfg).as_dict().items()}
    batch = wg_synth.synthetic_batch(cfg, B=2, seed=seed)
    return cfg, model, tables, batch


def run(model, batch, tables):
    out = {}
    preds = model(batch, tables, out)
    return out, preds


class ForwardTests(unittest.TestCase):
    def setUp(self):
        torch.set_default_dtype(torch.float64)

    def tearDown(self):
        torch.set_default_dtype(torch.float32)

    def close(self, a, b, what, tol=1e-9):
        self.assertEqual(tuple(a.shape), tuple(b.shape), what)
        if a.numel():
            err = (a - b).abs().max().item() / max(1.0, b.abs().max().item())
            self.assertLess(err, tol, what)

    def test_naive_appendix_a(self):
        cfg, model, tables, batch = build()
        one = N.split_batch(batch, model.num_cells)[0]
        out, _ = run(model, one, tables)
        with torch.no_grad():
            ref = N.naive_forward(model, one, tables)
        for k, v in ref.items():
            self.close(out[k].detach(), v, k)
        self.assertGreater(out["out.pred.ERA5.0"].shape[1], 0)

    def check_per_sample(self, over=None):
        cfg, model, tables, batch = build(over)
        C = model.num_cells
        out2, preds2 = run(model, batch, tables)
        loss2 = compute_loss(cfg, batch, preds2, train=True)
        parts = N.split_batch(batch, C)
        rows = batch.source_cell_lens[1:].view(2, C).sum(1).tolist()
        ne = (batch.source_cell_lens[1:].view(2, C) > 0).sum(1).tolist()
        losses, r0, n0 = [], 0, 0
        for b, one in enumerate(parts):
            out1, preds1 = run(model, one, tables)
            losses.append(compute_loss(cfg, one, preds1, train=True))
            for k in ("out.embed", "out.ae_local"):
                self.close(out2[k][r0:r0 + rows[b]].detach(), out1[k].detach(), f"{k} sample {b}")
            for k in ("out.ae_adapter", "out.ae_aggregation"):
                self.close(out2[k][n0:n0 + ne[b]].detach(), out1[k].detach(), f"{k} sample {b}")
            for k in out1:
                if k == "out.ae_global" or k.startswith("out.forecast"):
                    self.close(out2[k][b:b + 1].detach(), out1[k].detach(), f"{k} sample {b}")
            for si, s in enumerate(cfg["streams"]):
                for f, p1 in preds1[s["name"]].items():
                    cnt = batch.target_coords_idxs[si][f][1:].view(2, C).sum(1).tolist()
                    p2 = preds2[s["name"]][f][:, sum(cnt[:b]):sum(cnt[:b + 1])]
                    self.close(p2.detach(), p1.detach(), f"pred {s['name']} {f} sample {b}")
            r0, n0 = r0 + rows[b], n0 + ne[b]
        self.close(loss2.detach(), torch.stack(losses).mean().detach(), "loss = mean of the samples' losses")
        self.assertTrue(torch.isfinite(loss2))
        loss2.backward()
        dead = [n for n, p in model.named_parameters() if p.grad is None]
        self.assertTrue(all("embed_centroids" in n for n in dead), dead)
        self.assertTrue(all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None))
        return cfg, model, tables, batch, out2

    def test_per_sample_default_paths(self):
        cfg, model, tables, batch, out = self.check_per_sample()
        # empty cells carry q_cells + 2·pe_global (§4.4, §13.9)
        C = model.num_cells
        empty = torch.nonzero(batch.source_cell_lens[1:C + 1] == 0).squeeze(1)
        self.assertGreater(empty.numel(), 0)
        want = (model.q_cells[0] + 2 * tables["pe_global"])[empty, 0]
        G_in = model.assimilate_local(out["out.embed"], batch, tables, {})  # the global engine's input
        self.close(G_in[0, empty].detach(), want.detach(), "empty cells")

    def test_per_sample_forecast(self):
        _, _, _, _, out = self.check_per_sample(wg_synth.FORECAST)
        self.assertIn("out.forecast.1", out)
        self.assertIn("out.pred.ERA5.2", out)
        self.assertNotIn("out.pred.ERA5.0", out)

    def test_per_sample_local_blocks_and_two_queries(self):
        self.check_per_sample({"ae_global_num_blocks": 3, "ae_global_att_dense_rate": 0.5,
                               "ae_aggregation_num_blocks": 3, "ae_aggregation_att_dense_rate": 0.5,
                               "ae_local_num_queries": 2})

    def test_dropout_switch(self):
        # default rates: train mode is random, eval mode equals train mode with every rate at 0
        torch.manual_seed(0)
        cfg = wg_synth.small_config()
        model = WGModel(cfg)
        tables = {k: (v.double() if v.is_floating_point() else v) for k, v in Tables(cfg).as_dict().items()}
        batch = wg_synth.synthetic_batch(cfg, B=2, seed=0)
        rates = sorted({round(getattr(m, "dropout_rate", getattr(m, "p", -1)), 3) for m in model.modules()} - {-1})
        self.assertEqual(rates, [0.1])
        model.train()
        a, b = run(model, batch, tables)[0], run(model, batch, tables)[0]
        self.assertFalse(torch.equal(a["out.pred.ERA5.0"], b["out.pred.ERA5.0"]))
        model.eval()
        e = run(model, batch, tables)[0]
        model.train()
        set_dropout(model, 0.0)
        z = run(model, batch, tables)[0]
        for k in e:
            self.assertTrue(torch.equal(e[k], z[k]), k)

    def test_nan_target_coords_skip_stream(self):
        cfg, model, tables, batch = build()
        batch.data[1][1]["target_coords"][0][0, 0] = float("nan")
        out, preds = run(model, batch, tables)
        self.assertEqual(preds["OBS"][0].shape[1], 0)
        self.assertTrue(torch.isfinite(compute_loss(cfg, batch, preds)))


if __name__ == "__main__":
    unittest.main()
