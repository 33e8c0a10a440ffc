"""Synthetic configurations and batches for the WeatherGenerator twin's own tests and dumps.

Owns: a narrow configuration at healpix_level 2 with two streams (so that a
whole step runs in well under a second on 2 cores) and a synthetic batch laid
out as docs/step-dump.md says (B samples, global cell g = b*C + c, token
buffer ordered by g, then stream, then token), with the cases the checks need:
cells without source tokens (also in all streams), cells without targets, a
target cell whose 3x3 neighbourhood repeats itself (missing HEALPix neighbour),
NaN targets (one point all-NaN), padded token rows, a spoofed stream
(target_weight 0) in the last sample, and an ensemble head with 2 members.
"""
import copy

import torch

import wg_config as wc
from wg_step import Batch, fsteps_of
from wg_tables import hp_nbours

SMALL = {
    "healpix_level": 2,
    "ae_local_dim_embed": 24, "ae_local_num_blocks": 2, "ae_local_num_heads": 2,
    "ae_adapter_num_heads": 2, "ae_adapter_embed": 8,
    "ae_global_dim_embed": 32, "ae_global_num_blocks": 2, "ae_global_num_heads": 4,
    "ae_aggregation_num_blocks": 2, "ae_aggregation_num_heads": 4,
    "ae_global_block_factor": 16, "ae_aggregation_block_factor": 4,
    "streams": [
        {"name": "ERA5", "token_size": 4, "sources_size": 11, "targets_num_channels": 5,
         "targets_coords_size": 17,
         "embed": {"net": "transformer", "num_tokens": 1, "num_heads": 2, "dim_embed": 16, "num_blocks": 2},
         "embed_target_coords": {"net": "linear", "dim_embed": 16},
         "target_readout": {"type": "obs_value", "num_layers": 2, "num_heads": 2},
         "pred_head": {"ens_size": 1, "num_layers": 1}, "loss_weight": 1.0},
        {"name": "OBS", "token_size": 3, "sources_size": 9, "targets_num_channels": 3,
         "targets_coords_size": 13,
         "embed": {"net": "transformer", "num_tokens": 1, "num_heads": 2, "dim_embed": 8, "num_blocks": 1},
         "embed_target_coords": {"net": "linear", "dim_embed": 12},
         "target_readout": {"type": "obs_value", "num_layers": 1, "num_heads": 2},
         "pred_head": {"ens_size": 2, "num_layers": 2}, "loss_weight": 0.5,
         "channel_weights": [1.0, 0.5, 2.0]},
    ],
}

# Forecast-mode overlay used by the tests (§4.8: the fe_* keys have no spec default).
FORECAST = {"forecast_offset": 1, "forecast_steps": 1, "forecast_policy": "diffusion_free",
            "fe_num_blocks": 2, "fe_num_heads": 4, "fe_dropout_rate": 0.1, "fe_with_qk_lnorm": True,
            "forecast_att_dense_rate": 0.5, "training_mode": "forecast"}


def small_config(over=None):
    raw = copy.deepcopy(SMALL)
    for k, v in (over or {}).items():
        raw[k] = copy.deepcopy(v)
    return wc.model_config(raw)


def dup_cells(level):
    """Cells whose 9-set repeats the cell itself (a missing neighbour)."""
    nb = hp_nbours(level)
    return torch.nonzero((nb[:, 1:] == nb[:, :1]).any(1)).squeeze(1)


def synthetic_batch(cfg, B=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    C, streams = wc.num_cells(cfg), cfg["streams"]
    S, fsteps = len(streams), list(range(0, fsteps_of(cfg)[-1] + 1))
    dups = dup_cells(int(cfg["healpix_level"]))
    # tokens per (sample, stream, cell): about half the cells empty per stream
    lens = torch.randint(0, 4, (B, S, C), generator=g) * (torch.rand(B, S, C, generator=g) < 0.5)
    lens[:, :, : C // 8] = 0                       # a block of cells empty in every stream
    lens[:, 0, C // 8] = 3                         # at least one non-empty cell per sample
    tot = lens.sum(1).reshape(-1)                  # per global cell g = b*C + c
    base = torch.cumsum(tot, 0) - tot
    data = [[None] * S for _ in range(B)]
    for b in range(B):
        before = torch.zeros(C, dtype=torch.int64)  # tokens of earlier streams in each cell
        for si, s in enumerate(streams):
            n_c = lens[b, si]
            N, T, Fs = int(n_c.sum()), int(s["token_size"]), int(s["sources_size"])
            x = torch.randn(N, T, Fs, generator=g)
            if N:
                x[0, T - 1:] = 0.0                 # a token padded with an all-zero row
            cell = torch.repeat_interleave(torch.arange(C), n_c)
            rank = torch.arange(N) - (torch.cumsum(n_c, 0) - n_c)[cell]
            d = {"source_tokens_cells": x, "source_tokens_lens": n_c.clone(),
                 "source_centroids": torch.randn(N, 5, generator=g),
                 "source_idxs_embed": base[b * C + cell] + before[cell] + rank,
                 "source_idxs_embed_pe": before[cell] + rank,
                 "target_coords": {}, "target_tokens": {},
                 "target_weight": 0.0 if (b == B - 1 and si == S - 1 and S > 1) else 1.0}
            before += n_c
            data[b][si] = d
    tci = [{} for _ in range(S)]
    for si, s in enumerate(streams):
        for f in fsteps:
            counts = torch.randint(0, 4, (B, C), generator=g) * (torch.rand(B, C, generator=g) < 0.6)
            counts[:, dups[0]] = 2                 # targets in a cell with a repeated neighbour
            counts[:, dups[-1]] = 0
            tci[si][f] = torch.cat([torch.zeros(1, dtype=torch.int64), counts.reshape(-1)])
            for b in range(B):
                P, Fc, Ft = int(counts[b].sum()), int(s["targets_coords_size"]), int(s["targets_num_channels"])
                y = torch.randn(P, Ft, generator=g)
                y[torch.rand(P, Ft, generator=g) < 0.1] = float("nan")
                if P:
                    y[0] = float("nan")            # a point without any valid target
                data[b][si]["target_coords"][f] = torch.randn(P, Fc, generator=g)
                data[b][si]["target_tokens"][f] = y
    scl = torch.cat([torch.zeros(1, dtype=torch.int64), tot])
    return Batch(B, data, scl, tci)
