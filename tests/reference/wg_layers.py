"""Building blocks of the WeatherGenerator twin: MLP, AdaLayerNorm and the attention variants.

Owns (wg-model.md §4.1, §4.2, §5): the MLP (names `layers.{0,1,4}`), AdaLayerNorm
(`embed_aux.{0,2}`), the fp32 attention core of §5.5 and the attention modules
MultiSelfAttentionHead (dense), MultiSelfAttentionHeadLocal (block-diagonal),
MultiSelfAttentionHeadVarlen, MultiCrossAttentionHeadVarlen and
MultiCrossAttentionHeadVarlenSlicedQ, with upstream's parameter names and order.

Variable-length attention is written the way a PyTorch user would: the packed
rows of each call are padded to the longest segment ([S, L, H, d_h]) and keys
outside a segment are masked with -inf before the softmax. A query whose key
segment is empty gets output 0 (flash semantics), without NaN in forward or
backward: such rows are allowed to see the zero-padded keys, whose values are
0, so their output and every gradient through them are exactly 0.

On CUDA with torch >= 2.0 (the GPU benchmark, `wg_twin.py bench --device
cuda`) the core is torch's fused scaled_dot_product_attention over the same
padded layout and mask, as a PyTorch user on a GPU would write it; the CPU
path above is unchanged (the parity checks run it).

Dropout rates are plain attributes (`dropout_rate`) so that a whole model can be
switched to p = 0 (set_dropout) for the parity check.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Construction device: "meta" lets the 400M-parameter default model be built and
# counted without memory (torch 1.13 has no default-device context manager).
_DEVICE = {"device": None}


def set_build_device(device):
    _DEVICE["device"] = device


def Lin(i, o, bias=True):
    return nn.Linear(int(i), int(o), bias=bias, device=_DEVICE["device"])


def LNa(d, eps):
    return nn.LayerNorm(int(d), eps=eps, elementwise_affine=True, device=_DEVICE["device"])


def ln(x, eps):
    """LN without affine over the last dim (biased variance)."""
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


class LN(nn.Module):
    """Parameter-free LayerNorm (upstream: elementwise_affine=False)."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return ln(x, self.eps)


class AdaLayerNorm(nn.Module):
    """§4.2: y = LN(x) * (1 + scale) + shift, (scale, shift) = Lin(SiLU(Lin(aux)))."""

    def __init__(self, d, a, eps):
        super().__init__()
        self.d = int(d)
        self.embed_aux = nn.Sequential(Lin(a, 4 * a), nn.SiLU(), Lin(4 * a, 2 * d))
        self.norm = LN(eps)

    def forward(self, x, aux):
        z = self.embed_aux(aux)
        scale, shift = z[..., : self.d], z[..., self.d:]
        return self.norm(x) * (1.0 + scale) + shift


def pre_norm(d, eps, dim_aux):
    return AdaLayerNorm(d, dim_aux, eps) if dim_aux is not None else LN(eps)


def apply_norm(norm, x, aux):
    return norm(x, aux) if isinstance(norm, AdaLayerNorm) else norm(x)


class MLP(nn.Module):
    """§4.1: y = L4(Drop(GELU(L1(N0(x[, aux]))))) (+ x)."""

    def __init__(self, dim_in, dim_out, hidden_factor=2, dropout_rate=0.0, with_residual=True,
                 norm_eps=1e-5, dim_aux=None, num_layers=2):
        super().__init__()
        h = int(dim_in * hidden_factor)
        mods = [AdaLayerNorm(dim_in, dim_aux, norm_eps) if dim_aux is not None else LNa(dim_in, norm_eps),
                Lin(dim_in, h), nn.GELU(), nn.Dropout(dropout_rate)]
        for _ in range(num_layers - 2):
            mods += [Lin(h, h), nn.GELU(), nn.Dropout(dropout_rate)]
        mods.append(Lin(h, dim_out))
        self.layers = nn.ModuleList(mods)
        self.with_residual = with_residual
        self.dim_in, self.dim_out = int(dim_in), int(dim_out)

    def forward(self, *args):
        x, aux = args[0], args[-1]
        y = self.layers[0](x, aux) if isinstance(self.layers[0], AdaLayerNorm) else self.layers[0](x)
        for m in self.layers[1:]:
            y = m(y)
        if self.with_residual:
            if self.dim_in == self.dim_out:
                y = y + x
            elif self.dim_out % self.dim_in == 0:  # upstream tiles x along the last dim
                y = y + x.repeat(*([1] * (x.dim() - 1)), self.dim_out // self.dim_in)
            else:
                raise ValueError("MLP residual with widths that do not divide")
        return y


# ---------------------------------------------------------------- attention core (§5.5)

def attend(q, k, v, scale, key_valid=None, softcap=0.0, dropout_p=0.0, training=False):
    """q [..., Lq, H, dh], k/v [..., Lk, H, dh] -> [..., Lq, H, dh].

    key_valid: optional bool [..., Lk] (leading dims as q's). S = (q k^T) * scale
    (matmul, then scale), optional softcap, -inf outside key_valid, softmax, dropout
    on the probabilities, O = A V.
    """
    qh, kh, vh = q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2)  # [..., H, L, dh]
    if q.is_cuda and softcap == 0.0 and hasattr(F, "scaled_dot_product_attention"):
        # On a GPU with torch >= 2.0, as a PyTorch user writes it: the fused
        # kernel (flash where there is no mask, memory-efficient with one).
        mask = None
        if key_valid is not None:
            allowed = key_valid | ~key_valid.any(-1, keepdim=True)
            mask = allowed[..., None, None, :]  # [..., 1, 1, Lk]
        dt = vh.dtype  # under autocast the normed q and k are float32 and v bfloat16: one dtype for the kernel
        o = F.scaled_dot_product_attention(qh.to(dt), kh.to(dt), vh, attn_mask=mask,
                                           dropout_p=dropout_p if training else 0.0, scale=scale)
        return o.transpose(-3, -2)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    if key_valid is not None:
        # rows without any valid key may see the zero padding (values 0 -> output 0, no NaN)
        allowed = key_valid | ~key_valid.any(-1, keepdim=True)
        s = s.masked_fill(~allowed[..., None, None, :], float("-inf"))
    a = torch.softmax(s, dim=-1)
    if dropout_p > 0.0 and training:
        a = F.dropout(a, p=dropout_p, training=True)
    return torch.matmul(a, vh).transpose(-3, -2)


class Segments:
    """Layout of packed rows split into consecutive segments of lengths `lens` (no leading 0)."""

    def __init__(self, lens):
        lens = torch.as_tensor(lens, dtype=torch.int64).reshape(-1)
        self.lens = lens
        self.num = lens.numel()
        self.max_len = int(lens.max()) if self.num else 0
        self.rows = int(lens.sum())
        self.seg = torch.repeat_interleave(torch.arange(self.num), lens)
        starts = torch.cumsum(lens, 0) - lens
        self.pos = torch.arange(self.rows) - starts[self.seg]
        self.valid = torch.arange(self.max_len)[None, :] < lens[:, None]  # [S, L]

    def pad(self, x):
        """[rows, ...] -> [S, max_len, ...] with zeros outside the segments."""
        out = x.new_zeros((self.num, self.max_len) + tuple(x.shape[1:]))
        return out.index_put((self.seg, self.pos), x)

    def unpad(self, y):
        return y[self.seg, self.pos]


def varlen_attention(q, k, v, q_segs, k_segs, scale, softcap=0.0, dropout_p=0.0, training=False):
    """Packed q [Rq, H, dh], k/v [Rk, H, dh]; row r of q-segment s attends to k-segment s only."""
    if q_segs.num != k_segs.num:
        raise ValueError(f"{q_segs.num} query segments vs {k_segs.num} key segments")
    if q_segs.rows == 0:
        return q.new_zeros(q.shape)
    o = attend(q_segs.pad(q), k_segs.pad(k), k_segs.pad(v), scale, key_valid=k_segs.valid,
               softcap=softcap, dropout_p=dropout_p, training=training)
    return q_segs.unpad(o)


def block_segments(lengths, block):
    """Segments of §5.4 (⌊t/bf⌋ = ⌊u/bf⌋) within each of the consecutive sequences `lengths`."""
    per = []
    for n in lengths:
        n = int(n)
        per += [block] * (n // block) + ([n % block] if n % block else [])
    return Segments(torch.tensor(per, dtype=torch.int64))


# ---------------------------------------------------------------- attention modules

class _QKV(nn.Module):
    """Shared parts: pre-norm, projections q, k, v, out, per-head q/k LN (no params)."""

    def _heads(self, x, proj):
        return proj(x).reshape(*x.shape[:-1], self.num_heads, self.dim_head)

    def _qk_norm(self, t):
        return ln(t, self.norm_eps) if self.with_qk_lnorm else t


class MultiSelfAttentionHead(_QKV):
    """§5.1 dense self-attention over the second-to-last axis of [b, L, d].

    local_block > 0 turns it into MultiSelfAttentionHeadLocal (§5.4): block-diagonal
    attention with blocks of `local_block` rows, no probability dropout, Dropout on
    the concatenated head outputs before proj_out.
    `segments` (forward) restricts attention to consecutive row groups of a packed
    [R, d] input: used for per-sample dense attention over variable sequence lengths.
    """

    def __init__(self, dim, num_heads, dropout_rate=0.0, with_qk_lnorm=True, norm_eps=1e-5,
                 dim_aux=None, with_residual=True, local_block=0):
        super().__init__()
        self.num_heads, self.dim_head = int(num_heads), int(dim) // int(num_heads)
        self.with_qk_lnorm, self.norm_eps, self.with_residual = with_qk_lnorm, norm_eps, with_residual
        self.dropout_rate, self.local_block = dropout_rate, int(local_block)
        self.lnorm = pre_norm(dim, norm_eps, dim_aux)
        self.proj_heads_q = Lin(dim, dim, bias=False)
        self.proj_heads_k = Lin(dim, dim, bias=False)
        self.proj_heads_v = Lin(dim, dim, bias=False)
        self.proj_out = Lin(dim, dim, bias=False)

    def forward(self, x, ada_ln_aux=None, segments=None):
        """x [b, L, d] (dense over L), or packed [R, (E,) d] with `segments` (attention within
        each segment; E extra axes such as query slots are independent sequences)."""
        h = apply_norm(self.lnorm, x, ada_ln_aux)
        q = self._qk_norm(self._heads(h, self.proj_heads_q))
        k = self._qk_norm(self._heads(h, self.proj_heads_k))
        v = self._heads(h, self.proj_heads_v)
        scale = self.dim_head ** -0.5
        p = self.dropout_rate if self.local_block == 0 else 0.0   # Local: no probability dropout
        if segments is None and self.local_block > 0:             # [b, L] in blocks of local_block
            segments = block_segments([x.shape[1]] * x.shape[0], self.local_block)
            f = lambda t: t.flatten(0, 1)  # noqa: E731  [b, L, H, dh] -> packed rows [b*L, H, dh]
        else:                           # packed [R, (E,) H, dh]: fold the E axes into the heads
            f = lambda t: t.flatten(1, -2)  # noqa: E731
        if segments is not None:
            o = varlen_attention(f(q), f(k), f(v), segments, segments, scale, dropout_p=p,
                                 training=self.training).reshape(q.shape)
        else:
            o = attend(q, k, v, scale, dropout_p=p, training=self.training)
        o = o.flatten(-2)
        if self.local_block > 0:
            o = F.dropout(o, p=self.dropout_rate, training=self.training)
        y = self.proj_out(o)
        return y + x if self.with_residual else y


class MultiSelfAttentionHeadVarlen(_QKV):
    """§5.2 self-attention within consecutive segments of packed rows [R, d]."""

    def __init__(self, dim, num_heads, dropout_rate=0.0, with_qk_lnorm=True, norm_eps=1e-5,
                 dim_aux=None, with_residual=True):
        super().__init__()
        self.num_heads, self.dim_head = int(num_heads), int(dim) // int(num_heads)
        self.with_qk_lnorm, self.norm_eps, self.with_residual = with_qk_lnorm, norm_eps, with_residual
        self.dropout_rate = dropout_rate
        self.lnorm = pre_norm(dim, norm_eps, dim_aux)
        self.proj_heads_q = Lin(dim, dim, bias=False)
        self.proj_heads_k = Lin(dim, dim, bias=False)
        self.proj_heads_v = Lin(dim, dim, bias=False)
        self.proj_out = Lin(dim, dim, bias=False)

    def forward(self, x, segs, ada_ln_aux=None):
        h = apply_norm(self.lnorm, x, ada_ln_aux)
        q = self._qk_norm(self._heads(h, self.proj_heads_q))
        k = self._qk_norm(self._heads(h, self.proj_heads_k))
        v = self._heads(h, self.proj_heads_v)
        o = varlen_attention(q, k, v, segs, segs, self.dim_head ** -0.5, dropout_p=self.dropout_rate,
                             training=self.training)
        y = self.proj_out(o.flatten(-2))
        return y + x if self.with_residual else y


class MultiCrossAttentionHeadVarlen(_QKV):
    """§5.2 cross-attention: q-segment s attends to kv-segment s.

    kv_index (forward): optional row index into x_kv applied after the kv norm and
    projections (§4.9's cheaper equivalent: project the unique latent tokens, then
    gather the 9*nq neighbourhood rows of every cell).
    """

    def __init__(self, dim_q, dim_kv, num_heads, dim_head_proj=None, dropout_rate=0.0,
                 with_qk_lnorm=True, norm_eps=1e-5, dim_aux=None, with_residual=True, softcap=0.0):
        super().__init__()
        self.num_heads = int(num_heads)
        self.dim_head = int(dim_head_proj) if dim_head_proj else int(dim_q) // int(num_heads)
        inner = self.num_heads * self.dim_head
        self.with_qk_lnorm, self.norm_eps, self.with_residual = with_qk_lnorm, norm_eps, with_residual
        self.dropout_rate, self.softcap = dropout_rate, float(softcap or 0.0)
        self.lnorm_in_q = pre_norm(dim_q, norm_eps, dim_aux)
        self.lnorm_in_kv = LN(norm_eps)
        self.proj_heads_q = Lin(dim_q, inner, bias=False)
        self.proj_heads_k = Lin(dim_kv, inner, bias=False)
        self.proj_heads_v = Lin(dim_kv, inner, bias=False)
        self.proj_out = Lin(inner, dim_q, bias=False)

    def forward(self, x_q, x_kv, q_segs, kv_segs, ada_ln_aux=None, kv_index=None):
        hq = apply_norm(self.lnorm_in_q, x_q, ada_ln_aux)
        hkv = self.lnorm_in_kv(x_kv)
        q = self._qk_norm(self._heads(hq, self.proj_heads_q))
        k = self._qk_norm(self._heads(hkv, self.proj_heads_k))
        v = self._heads(hkv, self.proj_heads_v)
        if kv_index is not None:
            k, v = k[kv_index], v[kv_index]
        o = varlen_attention(q, k, v, q_segs, kv_segs, self.dim_head ** -0.5, softcap=self.softcap,
                             dropout_p=self.dropout_rate, training=self.training)
        y = self.proj_out(o.flatten(-2))
        return y + x_q if self.with_residual else y


class MultiCrossAttentionHeadVarlenSlicedQ(_QKV):
    """§4.5: per query slot its own q projection; shared k, v, out and all heads."""

    def __init__(self, dim_q, dim_kv, num_slices_q, num_heads, dim_head_proj, dropout_rate=0.0,
                 with_qk_lnorm=True, norm_eps=1e-4, with_residual=True):
        super().__init__()
        self.num_heads, self.dim_head = int(num_heads), int(dim_head_proj)
        inner = self.num_heads * self.dim_head
        self.with_qk_lnorm, self.norm_eps, self.with_residual = with_qk_lnorm, norm_eps, with_residual
        self.dropout_rate = dropout_rate
        self.lnorm_in_q = LN(norm_eps)
        self.lnorm_in_kv = LN(norm_eps)
        self.proj_heads_q = nn.ModuleList([Lin(dim_q, inner, bias=False) for _ in range(int(num_slices_q))])
        self.proj_heads_k = Lin(dim_kv, inner, bias=False)
        self.proj_heads_v = Lin(dim_kv, inner, bias=False)
        self.proj_out = Lin(inner, dim_q, bias=False)

    def forward(self, x_q, x_kv, q_segs, kv_segs):
        """x_q [n, nq, dim_q] (one row per segment and slot), x_kv [R, dim_kv]."""
        hq = self.lnorm_in_q(x_q)
        hkv = self.lnorm_in_kv(x_kv)
        k = self._qk_norm(self._heads(hkv, self.proj_heads_k))
        v = self._heads(hkv, self.proj_heads_v)
        outs = []
        for i, proj in enumerate(self.proj_heads_q):  # loop over query slots (nq), not cells
            q = self._qk_norm(self._heads(hq[:, i], proj))
            o = varlen_attention(q, k, v, q_segs, kv_segs, self.dim_head ** -0.5,
                                 dropout_p=self.dropout_rate, training=self.training)
            outs.append(o.flatten(-2))
        y = self.proj_out(torch.stack(outs, dim=1))
        return y + x_q if self.with_residual else y


def set_dropout(model, p):
    """Sets every dropout rate of the model (nn.Dropout and the attention rates) to p."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = p
        if hasattr(m, "dropout_rate"):
            m.dropout_rate = p
