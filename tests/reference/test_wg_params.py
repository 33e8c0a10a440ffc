#!/usr/bin/python3
"""Tests of the twin's state_dict (names, shapes, order, count) and initialisation (wg-model.md §6, §11).

Owns: the expected list of §6.1 written out independently of the model code
(default config, one ERA5 stream, built on the meta device), the per-section
counts of §11, and the init of §6.1/§6.4 on a narrow model (q_cells in
[0, 1/D_g), affine norms 1/0, forecast engine N(0, 1e-3), the dead
embed_centroids Lin(5 -> rem) without gradient).
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_synth  # noqa: E402
from wg_model import WGModel  # noqa: E402
from wg_twin import count_default  # noqa: E402


def attn(prefix, q, kv=None, out=None):
    kv = kv or q
    return [(f"{prefix}.proj_heads_q.weight", q), (f"{prefix}.proj_heads_k.weight", kv),
            (f"{prefix}.proj_heads_v.weight", kv), (f"{prefix}.proj_out.weight", out or q)]


def mlp(prefix, d, h, ada=None):
    first = ([(f"{prefix}.layers.0.embed_aux.0.weight", [4 * ada, ada]), (f"{prefix}.layers.0.embed_aux.0.bias", [4 * ada]),
              (f"{prefix}.layers.0.embed_aux.2.weight", [2 * d, 4 * ada]), (f"{prefix}.layers.0.embed_aux.2.bias", [2 * d])]
             if ada else [(f"{prefix}.layers.0.weight", [d]), (f"{prefix}.layers.0.bias", [d])])
    return first + [(f"{prefix}.layers.1.weight", [h, d]), (f"{prefix}.layers.1.bias", [h]),
                    (f"{prefix}.layers.4.weight", [d, h]), (f"{prefix}.layers.4.bias", [d])]


def adaln(prefix, d, a):
    return [(f"{prefix}.embed_aux.0.weight", [4 * a, a]), (f"{prefix}.embed_aux.0.bias", [4 * a]),
            (f"{prefix}.embed_aux.2.weight", [2 * d, 4 * a]), (f"{prefix}.embed_aux.2.bias", [2 * d])]


def expected_default():
    """§6.1, row by row, in state_dict order."""
    e = [("q_cells", [1, 1, 2048])]
    p = "embed_engine.embeds.ERA5"
    for b in range(2):
        e += attn(f"{p}.layers.{2 * b}", [256, 256]) + mlp(f"{p}.layers.{2 * b + 1}", 256, 512)
    e += [(f"{p}.embed.weight", [256, 8]), (f"{p}.embed.bias", [256])]
    for i in range(79):
        e += [(f"{p}.unembed.{i}.weight", [12, 256]), (f"{p}.unembed.{i}.bias", [12])]
    for i in range(79):
        e += [(f"{p}.ln_final.{i}.weight", [256]), (f"{p}.ln_final.{i}.bias", [256])]
    e += [(f"{p}.embed_centroids.weight", [76, 5]), (f"{p}.embed_centroids.bias", [76])]
    for b in range(2):
        e += attn(f"ae_local_engine.ae_local_blocks.{2 * b}", [1024, 1024])
        e += mlp(f"ae_local_engine.ae_local_blocks.{2 * b + 1}", 1024, 2048)
    for i in (0, 1, 2):
        pa = f"ae_local_global_engine.ae_adapter.{i}"
        if i == 1:
            e += mlp(pa, 2048, 4096)
        else:
            e += [(f"{pa}.proj_heads_q.0.weight", [2048, 2048]), (f"{pa}.proj_heads_k.weight", [2048, 1024]),
                  (f"{pa}.proj_heads_v.weight", [2048, 1024]), (f"{pa}.proj_out.weight", [2048, 2048])]
    for eng, n in (("ae_aggregation_engine.ae_aggregation_blocks", 2), ("ae_global_engine.ae_global_blocks", 8)):
        for b in range(n):
            e += attn(f"{eng}.{2 * b}", [2048, 2048]) + mlp(f"{eng}.{2 * b + 1}", 2048, 4096)
    e += [("embed_target_coords.ERA5.linear.weight", [256, 105])]
    t = "target_token_engines.ERA5.tte"
    for l in range(2):
        e += adaln(f"{t}.{3 * l}.lnorm_in_q", 256, 105) + attn(f"{t}.{3 * l}", [256, 256], [256, 2048])
        e += adaln(f"{t}.{3 * l + 1}.lnorm", 256, 105) + attn(f"{t}.{3 * l + 1}", [256, 256])
        e += mlp(f"{t}.{3 * l + 2}", 256, 512, ada=105)
    e += [("pred_heads.ERA5.pred_heads.0.0.weight", [72, 256]), ("pred_heads.ERA5.pred_heads.0.0.bias", [72])]
    return e


SECTIONS = {"q_cells": 2048, "embed_engine": 1337980, "ae_local_engine": 16787456,
            "ae_local_global_engine": 41953280, "ae_aggregation_engine": 67129344,
            "ae_global_engine": 268517376, "forecast_engine": 0, "pred_adapter_kv": 0,
            "embed_target_coords": 26880, "target_token_engines": 4969840, "pred_heads": 18504}


class ParamTests(unittest.TestCase):
    def test_default_state_dict(self):
        model, n_t, n_p = count_default()
        got = [(k, list(v.shape)) for k, v in model.state_dict().items()]
        want = expected_default()
        self.assertEqual(len(want), 526)
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(g, w, f"entry {i}")
        self.assertEqual(len(got), len(want))
        self.assertEqual((n_t, n_p), (526, 400742708))
        for sec, n in SECTIONS.items():
            self.assertEqual(sum(v.numel() for k, v in model.state_dict().items() if k.split(".")[0] == sec), n, sec)
        self.assertTrue(all(p.requires_grad for p in model.parameters()))

    def test_init_small(self):
        torch.manual_seed(0)
        cfg = wg_synth.small_config(wg_synth.FORECAST)
        m = WGModel(cfg)
        Dg = cfg["ae_global_dim_embed"]
        self.assertTrue(bool((m.q_cells >= 0).all() and (m.q_cells < 1.0 / Dg).all()))
        sd = m.state_dict()
        for k, v in sd.items():
            if k.endswith((".layers.0.weight", ".layers.0.bias")) or ".ln_final." in k:
                self.assertTrue(torch.equal(v, torch.ones_like(v) if k.endswith("weight") else torch.zeros_like(v)), k)
        fe = torch.cat([v.flatten() for k, v in sd.items() if k.startswith("forecast_engine")])
        self.assertGreater(fe.numel(), 10000)
        self.assertLess(abs(fe.std().item() - 1e-3), 1e-4)
        # small config: rem = 24 mod 11 = 2 -> embed_centroids Lin(5 -> 2), unembed widths (24-2)/11 = 2
        self.assertEqual(list(sd["embed_engine.embeds.ERA5.embed_centroids.weight"].shape), [2, 5])
        self.assertEqual(list(sd["embed_engine.embeds.ERA5.unembed.0.weight"].shape), [2, 16])
        self.assertEqual(list(sd["embed_engine.embeds.OBS.embed_centroids.weight"].shape), [6, 5])
        # forecast engine: dense where i % int(1/0.5) == 0 or i + 1 == ae_global_num_blocks (2) [sic]
        kinds = [blk.local_block for blk in m.forecast_engine.fe_blocks[0::2]]
        self.assertEqual(kinds, [0, 0])
        # ensemble head: 2 members, 2 layers: Lin(d -> 2d), GELU, Lin(2d -> out), Identity
        self.assertEqual([k for k in sd if k.startswith("pred_heads.OBS")],
                         [f"pred_heads.OBS.pred_heads.{m_}.{i}.{w}" for m_ in (0, 1) for i in (0, 2) for w in ("weight", "bias")])
        # prediction heads come from streams[0] for every stream (§13.11)
        self.assertEqual(m.target_token_engines["OBS"].tte[0].num_heads, 2)

    def test_dense_rate_half(self):
        cfg = wg_synth.small_config({"ae_global_num_blocks": 4, "ae_global_att_dense_rate": 0.5,
                                     "ae_aggregation_num_blocks": 3, "ae_aggregation_att_dense_rate": 0.5})
        m = WGModel(cfg)
        self.assertEqual([b.local_block for b in m.ae_global_engine.ae_global_blocks[0::2]], [0, 16, 0, 0])
        self.assertEqual([b.local_block for b in m.ae_aggregation_engine.ae_aggregation_blocks[0::2]], [0, 4, 0])


if __name__ == "__main__":
    unittest.main()
