#!/usr/bin/python3
"""Tests of the twin's LossPhysical (wg-model.md §9.1, §9.2) with hand-computed values.

Owns: NaN targets (target and prediction zeroed, still counted in the means),
the train config 0.7·(0.8·MSE + 0.2·MAE)/2 with stream and channel weights, the
validation config (plain MSE), division by the number of positive loss terms,
ensemble mean, spoofed streams (weight 0, not counted), averaging over forecast
steps, and for B = 2 the mean over samples.
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_config as wc  # noqa: E402
from wg_loss import compute_loss  # noqa: E402
from wg_step import Batch  # noqa: E402

C = 12  # healpix_level 0
NAN = float("nan")


def make(streams, samples, over=None):
    """samples[b][si] = {f: (target [P, F], pred [ens, P, F])}, all points in cell 0."""
    cfg = wc.model_config(dict({"healpix_level": 0, "streams": streams}, **(over or {})))
    B, S = len(samples), len(streams)
    data = [[{"target_tokens": {}, "target_weight": samples[b][si].get("w", 1.0)} for si in range(S)] for b in range(B)]
    tci, preds = [{} for _ in range(S)], {s["name"]: {} for s in streams}
    for si, s in enumerate(streams):
        fs = sorted(k for k in samples[0][si] if k != "w")
        for f in fs:
            counts = torch.zeros(B, C, dtype=torch.int64)
            ps = []
            for b in range(B):
                t, p = samples[b][si][f]
                data[b][si]["target_tokens"][f] = torch.tensor(t)
                counts[b, 0] = len(t)
                ps.append(torch.tensor(p))
            tci[si][f] = torch.cat([torch.zeros(1, dtype=torch.int64), counts.flatten()])
            preds[s["name"]][f] = torch.cat(ps, dim=1)
    return cfg, Batch(B, data, None, tci), preds


def stream(name, F, loss_weight=1.0, channel_weights=None, tokenize_spacetime=False):
    return {"name": name, "sources_size": 4, "targets_num_channels": F, "targets_coords_size": 3,
            "loss_weight": loss_weight, "channel_weights": channel_weights,
            "tokenize_spacetime": tokenize_spacetime}


T1 = [[1.0, NAN], [NAN, 2.0], [0.5, -1.0]]
P1 = [[[0.0, 3.0], [1.0, 1.0], [1.5, 0.0]]]
# per channel, NaN entries count as 0 with P = 3 points:
# ch0: (1-0)^2 + 0 + (0.5-1.5)^2 = 2 -> 2/3 ; |.|: 1 + 0 + 1 = 2 -> 2/3
# ch1: 0 + (2-1)^2 + (-1-0)^2 = 2 -> 2/3   ; |.|: 0 + 1 + 1 = 2 -> 2/3
MSE1, MAE1 = 2.0 / 3.0, 2.0 / 3.0


class LossTests(unittest.TestCase):
    def test_train_nan_and_weights(self):
        cfg, batch, preds = make([stream("A", 2, loss_weight=0.5, channel_weights=[1.0, 3.0])], [[{0: (T1, P1)}]])
        # channel-weighted: mean(c0·1, c1·3) = (2/3 + 2)/2 = 4/3 for both MSE and MAE
        want = 0.7 * (0.8 * (4 / 3) * 0.5 + 0.2 * (4 / 3) * 0.5) / 2
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=True).item(), want, places=6)
        # validation: unweighted MSE, module weight 1.0
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=False).item(), MSE1, places=6)

    def test_default_total(self):
        cfg, batch, preds = make([stream("A", 2)], [[{0: (T1, P1)}]])
        self.assertAlmostEqual(compute_loss(cfg, batch, preds).item(), 0.28 * MSE1 + 0.07 * MAE1, places=6)

    def test_ensemble_mean(self):
        p = [[[0.0, 3.0], [1.0, 1.0], [1.5, 0.0]], [[0.0, 3.0], [1.0, 1.0], [1.5, 0.0]]]
        p[1] = [[v + 1.0 for v in row] for row in p[1]]
        p[0] = [[v - 1.0 for v in row] for row in p[0]]
        cfg, batch, preds = make([stream("A", 2)], [[{0: (T1, p)}]])
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=False).item(), MSE1, places=6)

    def test_positive_terms_only(self):
        # a perfect prediction: both terms 0 -> no positive term, so the stream has no
        # counted fstep and does not count among the streams (upstream's ctr_fsteps > 0)
        t = [[1.0, 2.0]]
        cfg, batch, preds = make([stream("A", 2), stream("B", 2)], [[{0: (t, [t])}, {0: (T1, P1)}]])
        self.assertAlmostEqual(compute_loss(cfg, batch, preds).item(), 0.28 * MSE1 + 0.07 * MAE1, places=6)
        # MSE-only train config with weight 1 on a stream whose MAE would be positive
        cfg2, batch2, preds2 = make([stream("A", 2)], [[{0: (T1, P1)}]],
                                    {"training_mode_config": {"losses": {"LossPhysical": {
                                        "weight": 1.0, "loss_fcts": [["mse", 1.0]]}}}})
        self.assertAlmostEqual(compute_loss(cfg2, batch2, preds2).item(), MSE1, places=6)

    def test_substeps_by_time(self):
        # tokenize_spacetime: one sub-step per distinct target time, the mean over positive ones
        T2 = [[1.0, 2.0], [3.0, 4.0]]
        P2 = [[[1.0, 2.0], [1.0, 2.0]]]        # exact at time 0, off by (2, 2) at time 1
        cfg, batch, preds = make([stream("A", 2, tokenize_spacetime=True)], [[{0: (T2, P2)}]],
                                 {"validation_mode_config": {"losses": {"LossPhysical": {
                                     "weight": 1.0, "loss_fcts": [["mse", 1.0]]}}}})
        batch.data[0][0]["target_times"] = {0: torch.tensor([0, 3600])}
        # sub-step 0: 0 (not counted), sub-step 1: 4 -> 4 / 1
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=False).item(), 4.0, places=6)
        batch.data[0][0]["target_times"] = {0: torch.tensor([0, 0])}   # one time: mean over both points
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=False).item(), 2.0, places=6)

    def test_spoofed_and_samples(self):
        s0 = [{0: (T1, P1)}, {0: ([[5.0, 5.0]], [[[0.0, 0.0]]]), "w": 0.0}]   # B spoofed in sample 0
        s1 = [{0: ([[1.0, 1.0]], [[[0.0, 0.0]]])}, {0: ([[2.0, 0.0]], [[[0.0, 0.0]]])}]
        cfg, batch, preds = make([stream("A", 2), stream("B", 2)], [s0, s1], {
            "validation_mode_config": {"LossPhysical": {"weight": 1.0, "loss_fcts": [["mse", 1.0]]}}})
        # sample 0: only A counts -> MSE1; sample 1: (1 + 2)/2 = 1.5; mean over samples
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=False).item(), (MSE1 + 1.5) / 2, places=6)

    def test_forecast_steps_average(self):
        over = {"forecast_offset": 1, "forecast_steps": 1}
        cfg, batch, preds = make([stream("A", 1)], [[{1: ([[1.0]], [[[0.0]]]), 2: ([[3.0]], [[[0.0]]])}]], over)
        self.assertAlmostEqual(compute_loss(cfg, batch, preds, train=False).item(), (1.0 + 9.0) / 2, places=6)

    def test_no_stream_with_data_is_nan(self):
        cfg, batch, preds = make([stream("A", 1)], [[{0: ([[1.0]], [[[0.0]]]), "w": 0.0}]])
        self.assertTrue(torch.isnan(compute_loss(cfg, batch, preds)))


if __name__ == "__main__":
    unittest.main()
