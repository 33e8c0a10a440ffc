"""Test-only references for the WeatherGenerator twin: naive per-segment loops (never used by the model).

Owns: a naive attention (one head, one segment at a time, Python loops), naive
versions of every attention module computed from the module's weights, a
naive whole forward written directly from wg-model.md Appendix A (B = 1:
explicit loops over cells, the literal neighbour gather Lt = G[hp_nbours]), and
splitting a B-sample batch into B one-sample batches.
"""
import math

import torch
import torch.nn.functional as F

from wg_layers import AdaLayerNorm, MLP
from wg_step import Batch


def n_ln(x, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps)


def n_norm(norm, x, aux, eps):
    if isinstance(norm, AdaLayerNorm):
        seq = norm.embed_aux
        z = F.linear(F.silu(F.linear(aux, seq[0].weight, seq[0].bias)), seq[2].weight, seq[2].bias)
        d = x.shape[-1]
        return n_ln(x, eps) * (1 + z[..., :d]) + z[..., d:]
    return n_ln(x, eps)


def n_attn(q, k, v, scale):
    """q [Lq, H, dh], k/v [Lk, H, dh]; heads one by one; no keys -> 0."""
    if k.shape[0] == 0:
        return torch.zeros(q.shape[0], q.shape[1], v.shape[2])
    out = []
    for h in range(q.shape[1]):
        s = (q[:, h] @ k[:, h].T) * scale
        out.append(torch.softmax(s, -1) @ v[:, h])
    return torch.stack(out, 1)


def n_varlen(q, k, v, qlens, klens, scale):
    """A Python loop over segments (the reference the padded model code is tested against)."""
    outs, cq, ck = [], 0, 0
    for lq, lk in zip([int(x) for x in qlens], [int(x) for x in klens]):
        outs.append(n_attn(q[cq:cq + lq], k[ck:ck + lk], v[ck:ck + lk], scale))
        cq, ck = cq + lq, ck + lk
    return torch.cat(outs) if outs else q.new_zeros(q.shape)


def _heads(x, W, H):
    y = x @ W.T
    return y.reshape(x.shape[0], H, -1)


def n_self(m, x, lens, aux=None):
    """MultiSelfAttentionHead(Varlen) on packed rows x [R, d] with segments `lens` (residual incl.)."""
    H, eps = m.num_heads, m.norm_eps
    h = n_norm(m.lnorm, x, aux, eps)
    q, k, v = _heads(h, m.proj_heads_q.weight, H), _heads(h, m.proj_heads_k.weight, H), _heads(h, m.proj_heads_v.weight, H)
    if m.with_qk_lnorm:
        q, k = n_ln(q, eps), n_ln(k, eps)
    o = n_varlen(q, k, v, lens, lens, m.dim_head ** -0.5).reshape(x.shape[0], -1)
    return o @ m.proj_out.weight.T + x


def n_cross(m, xq, xkv, qlens, klens, aux=None):
    H, eps = m.num_heads, m.norm_eps
    hq, hk = n_norm(m.lnorm_in_q, xq, aux, eps), n_ln(xkv, eps)
    q, k, v = _heads(hq, m.proj_heads_q.weight, H), _heads(hk, m.proj_heads_k.weight, H), _heads(hk, m.proj_heads_v.weight, H)
    if m.with_qk_lnorm:
        q, k = n_ln(q, eps), n_ln(k, eps)
    o = n_varlen(q, k, v, qlens, klens, m.dim_head ** -0.5).reshape(xq.shape[0], -1)
    return o @ m.proj_out.weight.T + xq


def n_sliced(m, xq, xkv, klens):
    """SlicedQ: xq [n, nq, dq], one query row per segment and slot."""
    H, eps = m.num_heads, m.norm_eps
    hq, hk = n_ln(xq, eps), n_ln(xkv, eps)
    k, v = n_ln(_heads(hk, m.proj_heads_k.weight, H), eps), _heads(hk, m.proj_heads_v.weight, H)
    outs = []
    for i, proj in enumerate(m.proj_heads_q):
        q = n_ln(_heads(hq[:, i], proj.weight, H), eps)
        outs.append(n_varlen(q, k, v, [1] * xq.shape[0], klens, m.dim_head ** -0.5).reshape(xq.shape[0], -1))
    return torch.stack(outs, 1) @ m.proj_out.weight.T + xq


def n_mlp(m, x, aux=None):
    l0 = m.layers[0]
    if isinstance(l0, AdaLayerNorm):
        h = n_norm(l0, x, aux, l0.norm.eps)
    else:
        h = n_ln(x, l0.eps) * l0.weight + l0.bias
    h = F.gelu(h @ m.layers[1].weight.T + m.layers[1].bias)
    y = h @ m.layers[4].weight.T + m.layers[4].bias
    return y + x if m.with_residual else y


def n_block_seq(blocks, x):
    """Dense attention / MLP blocks on one sequence x [L, d]."""
    for blk in blocks:
        x = n_mlp(blk, x) if isinstance(blk, MLP) else n_self(blk, x, [x.shape[0]])
    return x


def n_embed(m, x):
    """StreamEmbedTransformer, block mode, x [N, T, F]: token by token."""
    outs = []
    for n in range(x.shape[0]):
        h = x[n].T @ m.embed.weight.T + m.embed.bias                       # [F, E]
        Fn, E = h.shape
        pe = torch.zeros(Fn, E)
        for r in range(Fn):
            for kk in range(E // 2):
                a = r * math.exp(2 * kk * (-math.log(10000.0) / E))
                pe[r, 2 * kk], pe[r, 2 * kk + 1] = math.sin(a), math.cos(a)
        h = n_block_seq(m.layers, h + pe)
        y = torch.cat([(n_ln(h[i], 1e-6) * m.ln_final[i].weight + m.ln_final[i].bias) @ m.unembed[i].weight.T
                       + m.unembed[i].bias for i in range(Fn)])
        outs.append(F.pad(y, (0, m.dim_out - y.shape[0])))
    return torch.stack(outs) if outs else torch.zeros(0, m.dim_out)


def naive_forward(model, batch, tables):
    """Appendix A for B = 1 with loops over cells; returns the same out.* keys as the model."""
    cfg, C = model.cfg, model.num_cells
    assert batch.B == 1 and model.nq == 1
    out, M = {}, int(batch.source_cell_lens[1:].sum())
    buf = torch.zeros(M, int(cfg["ae_local_dim_embed"]))
    for si, s in enumerate(cfg["streams"]):
        d = batch.data[0][si]
        Y = n_embed(model.embed_engine.embeds[s["name"]], d["source_tokens_cells"])
        for j in range(Y.shape[0]):
            buf[int(d["source_idxs_embed"][j])] = Y[j] + tables["pe_embed"][int(d["source_idxs_embed_pe"][j])]
    out["out.embed"] = buf
    lens = [int(v) for v in batch.source_cell_lens[1:]]
    x = buf
    for blk in model.ae_local_engine.ae_local_blocks:
        x = n_mlp(blk, x) if isinstance(blk, MLP) else n_self(blk, x, lens)
    out["out.ae_local"] = x
    ne = [c for c in range(C) if lens[c] > 0]
    Q0 = model.q_cells[0] + tables["pe_global"]                             # [C, 1, Dg]
    Q = Q0[ne]
    a = model.ae_local_global_engine.ae_adapter
    Q = n_sliced(a[0], Q, x, [lens[c] for c in ne])
    Q = n_mlp(a[1], Q)
    Q = n_sliced(a[2], Q, x, [lens[c] for c in ne])
    out["out.ae_adapter"] = Q
    Y = n_block_seq(model.ae_aggregation_engine.ae_aggregation_blocks, Q[:, 0])[:, None]
    out["out.ae_aggregation"] = Y
    G = Q0.clone()
    for i, c in enumerate(ne):
        G[c] = Y[i]
    G = (G + tables["pe_global"])[:, 0]
    G = n_block_seq(model.ae_global_engine.ae_global_blocks, G)
    out["out.ae_global"] = G[None]
    Lt = G[tables["hp_nbours"].long().flatten()]                             # [9C, Dg]
    for si, s in enumerate(cfg["streams"]):
        tc = batch.data[0][si]["target_coords"][0]
        qlens = [int(v) for v in batch.target_coords_idxs[si][0][1:]]
        e = tc @ model.embed_target_coords[s["name"]].linear.weight.T
        for blk in model.target_token_engines[s["name"]].tte:
            if isinstance(blk, MLP):
                e = n_mlp(blk, e, tc)
            elif hasattr(blk, "lnorm_in_kv"):
                e = n_cross(blk, e, Lt, qlens, [9] * C, tc)
            else:
                e = n_self(blk, e, qlens, tc)
        heads = model.pred_heads[s["name"]].pred_heads
        out[f"out.pred.{s['name']}.0"] = torch.stack([h(e) for h in heads])
    return out


def split_batch(batch, C):
    """One-sample batches of a B-sample batch (global cells b*C + c -> c, token rows re-based)."""
    lens = batch.source_cell_lens[1:]
    out = []
    for b in range(batch.B):
        row0 = int(lens[: b * C].sum())
        data = []
        for d in batch.data[b]:
            d = dict(d)
            d["source_idxs_embed"] = d["source_idxs_embed"] - row0
            data.append(d)
        scl = torch.cat([torch.zeros(1, dtype=torch.int64), lens[b * C:(b + 1) * C]])
        tci = [{f: torch.cat([torch.zeros(1, dtype=torch.int64), t[1:][b * C:(b + 1) * C]]) for f, t in per.items()}
               for per in batch.target_coords_idxs]
        out.append(Batch(1, [data], scl, tci))
    return out
