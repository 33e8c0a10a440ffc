"""Non-trainable tables of the WeatherGenerator twin (wg-model.md §3, `ModelParams`).

Owns: pe_embed [1024, D_l], pe_global [C, nq, D_g] (bf16-rounded values held
in float32, the canonical recipe of §3.2), hp_nbours [C, 9] (astropy_healpix,
NESTED, order self, SW, W, NW, N, NE, E, SE, S, missing -> self), tokens_lens
and q_cells_lens. None of these is part of the model's state_dict.

sin/cos: the arguments are formed in float32 exactly as §3.1/§3.2 say; sin and
cos of that float32 number are then evaluated in float64 and rounded to
float32 ("evaluate sin/cos of that fp32 number accurately", §3.2). Upstream
used torch's float32 sin/cos; the two can differ by 1 fp32 ulp, which changes
the bf16 value only where it straddles a bf16 rounding boundary (rare).
"""
import math
import warnings

import numpy as np
import torch

PE_EMBED_ROWS = 1024  # len_token_seq upstream: the max number of tokens in one cell


def _bf16(x):
    """Round-to-nearest-even to bfloat16, held in float32."""
    return x.to(torch.bfloat16).to(torch.float32)


def _sin32(arg32):
    return torch.sin(arg32.double()).float()


def _cos32(arg32):
    return torch.cos(arg32.double()).float()


def pe_embed(dim):
    """§3.1: pe[p, 2k] = sin(p*w_k), pe[p, 2k+1] = cos(p*w_k), w_k = exp(2k * (-ln 1024 / dim))."""
    if dim % 2:
        raise ValueError("ae_local_dim_embed must be even")
    const = torch.tensor(-math.log(PE_EMBED_ROWS) / dim, dtype=torch.float32)  # the constant in fp32
    two_k = torch.arange(0, dim, 2, dtype=torch.float32)                       # 2k, exact
    omega = torch.exp(two_k * const)                                           # fp32 product, fp32 exp
    pos = torch.arange(PE_EMBED_ROWS, dtype=torch.float32)
    arg = pos[:, None] * omega[None, :]                                        # fp32 product
    pe = torch.empty(PE_EMBED_ROWS, dim, dtype=torch.float32)
    pe[:, 0::2] = _sin32(arg)
    pe[:, 1::2] = _cos32(arg)
    return _bf16(pe)


def pe_global(num_cells, nq, dim):
    """§3.2 canonical recipe; [C, nq, dim]."""
    if dim % 2:
        raise ValueError("ae_global_dim_embed must be even")
    two_pi = torch.tensor(2.0 * math.pi, dtype=torch.float32)        # 6.2831855f
    two_j = torch.arange(0, dim, 2, dtype=torch.float32)
    x = (two_pi * two_j) / dim                                        # fp32 product; /dim exact for 2^k
    c = torch.arange(num_cells, dtype=torch.float32)
    cell_arg = c[:, None] * x[None, :]                                # one fp32 product
    out = torch.empty(num_cells, nq, dim, dtype=torch.float32)
    for q in range(nq):
        q_arg = torch.tensor(8.0 * q, dtype=torch.float32) * x         # fp32(8q * x_j)
        even = _bf16(0.5 * _sin32(q_arg))                              # bf16 slot term first ...
        odd = _bf16(0.5 * _cos32(q_arg))
        out[:, q, 0::2] = _bf16(even[None, :] + _sin32(cell_arg))      # ... then += in fp32, round
        out[:, q, 1::2] = _bf16(odd[None, :] + _cos32(cell_arg))
    return out


def hp_nbours(level):
    """§3.3: [C, 9] int64 rows [c, SW, W, NW, N, NE, E, SE, S], NESTED; a missing neighbour -> c."""
    from astropy_healpix import neighbours
    nside = 2 ** int(level)
    cells = np.arange(12 * nside * nside, dtype=np.int64)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the C loop warns where it returns -1
        nb = neighbours(cells, nside, order="nested")     # [8, C] in SW, W, NW, N, NE, E, SE, S
    nb = np.asarray(nb, dtype=np.int64).T
    nb = np.where(nb < 0, cells[:, None], nb)
    return torch.from_numpy(np.concatenate([cells[:, None], nb], axis=1).copy())


def tokens_lens(batch_size, num_cells, nq):
    """§3.4 with target_cell_local_prediction: [0, 9nq, 9nq, ...], length 1 + B*C."""
    t = torch.full((1 + batch_size * num_cells,), 9 * nq, dtype=torch.int64)
    t[0] = 0
    return t


def q_cells_lens(num_cells):
    """§3.5: [0, 1, ..., 1], length 1 + C."""
    t = torch.ones(1 + num_cells, dtype=torch.int64)
    t[0] = 0
    return t


class Tables:
    """The tables one model configuration needs (float32 / int64, CPU)."""

    def __init__(self, cfg):
        C = 12 * 4 ** int(cfg["healpix_level"])
        nq = int(cfg["ae_local_num_queries"])
        self.num_cells = C
        self.nq = nq
        self.pe_embed = pe_embed(int(cfg["ae_local_dim_embed"]))
        self.pe_global = pe_global(C, nq, int(cfg["ae_global_dim_embed"]))
        self.hp_nbours = hp_nbours(int(cfg["healpix_level"]))

    def as_dict(self):
        return {"pe_embed": self.pe_embed, "pe_global": self.pe_global, "hp_nbours": self.hp_nbours}
