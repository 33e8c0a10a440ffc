"""PyTorch twin of the C++ trainer's network (src/model/*.cpp).

Owns the modules, with the same parameter names and shapes as the LibTorch
modules (state_dict names embed_engine.embeds.<S>.*, latent_adapter.*,
latent_engine.*, pred_heads.<S>.*), the checkpoint plan (which pieces
recompute in backward), the masked-token loss, and reading the run
configuration (load_config). Float32, CPU; the C++ bf16 attention on CUDA
is not mirrored.

Pieces (the units of recomputation, as in include/wg/plan/recompute_plan.h):
  embed (per stream): input, block i attn, block i mlp, readout
  latent:             block i attn, block i mlp
  pred (per stream):  head
"""
import math
import os

import torch
import torch.nn.functional as F
import yaml
from torch import nn
from torch.utils.checkpoint import checkpoint

CENTROID_FEATURES = 5  # kCentroidFeatures in the C++ code

# ---------------------------------------------------------------- config


def load_config(path):
    """The run configuration as a dict, with "streams": a list of dicts.

    A resolved config (written by wgtrain) has every key; a partial one (e.g.
    config/cpu_tiny.yml) is laid over config/default_config.yml when that
    file is found next to the given one or in the repository. A relative
    streams_directory is taken relative to the file that sets it. Stream
    files: every *.yml/*.yaml in streams_directory, sorted by file name, each
    mapping NAME -> settings.
    """
    with open(path) as f:
        user = yaml.safe_load(f) or {}
    repo_config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "config")
    default_path = os.path.normpath(os.path.join(repo_config, "default_config.yml"))
    cfg, streams_base = {}, os.path.dirname(os.path.abspath(path))
    if os.path.exists(default_path) and os.path.abspath(path) != default_path:
        with open(default_path) as f:
            cfg = yaml.safe_load(f) or {}
        if "streams_directory" not in user:
            streams_base = os.path.dirname(default_path)
    cfg.update(user)
    sdir = os.path.join(streams_base, cfg["streams_directory"])
    files = sorted(n for n in os.listdir(sdir) if n.endswith((".yml", ".yaml")))
    streams = []
    for name in files:
        with open(os.path.join(sdir, name)) as f:
            doc = yaml.safe_load(f) or {}
        for sname, s in doc.items():
            emb, syn = s.get("embed", {}), s.get("synthetic", {})
            streams.append({
                "name": str(sname),
                "token_size": int(s.get("token_size", 8)),
                "loss_weight": float(s.get("loss_weight", 1.0)),
                "num_tokens": int(emb.get("num_tokens", 1)),
                "num_heads": int(emb.get("num_heads", 8)),
                "dim_embed": int(emb.get("dim_embed", 256)),
                "num_blocks": int(emb.get("num_blocks", 2)),
                "num_channels": int(syn.get("num_channels", 16)),
            })
    cfg["streams"] = streams
    return cfg


# ---------------------------------------------------------------- layers


def plain_norm(x, norm_type):
    """Pre-norm without affine parameters (LayerNorm eps 1e-5, or RMS)."""
    if norm_type == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    return F.layer_norm(x, (x.shape[-1],), eps=1e-5)


def harmonic_encoding(length, dim, dtype=torch.float32):
    """pe[p, 2i] = sin(p * exp(-2i ln(10000) / dim)), pe[p, 2i+1] = cos(same); in f64, then cast."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div[: dim // 2])
    return pe.to(dtype)


class MultiSelfAttentionHead(nn.Module):
    """x + proj_out(attention(norm(x))) with per-head qk LayerNorm (no affine)."""

    def __init__(self, dim, num_heads, dropout=0.0, norm_type="LayerNorm"):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"attention: dim {dim} not divisible by {num_heads} heads")
        self.num_heads, self.dim_head = num_heads, dim // num_heads
        self.dropout, self.norm_type = dropout, norm_type
        self.proj_heads_q = nn.Linear(dim, dim, bias=False)
        self.proj_heads_k = nn.Linear(dim, dim, bias=False)
        self.proj_heads_v = nn.Linear(dim, dim, bias=False)
        self.proj_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):  # [B, S, D] -> [B, S, D]
        B, S, _ = x.shape
        H, dh = self.num_heads, self.dim_head
        h = plain_norm(x, self.norm_type)

        def heads(t):  # [B, S, D] -> [B, H, S, dh]
            return t.view(B, S, H, dh).transpose(1, 2)

        q = F.layer_norm(heads(self.proj_heads_q(h)), (dh,), eps=1e-5)
        k = F.layer_norm(heads(self.proj_heads_k(h)), (dh,), eps=1e-5)
        v = heads(self.proj_heads_v(h))
        p = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh)), -1)
        p = F.dropout(p, self.dropout, self.training)
        out = torch.matmul(p, v).transpose(1, 2).reshape(B, S, H * dh)
        return x + self.proj_out(out)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mlp(nn.Module):
    """x + layers(x), layers = [norm, Linear(d, f*d), GELU, Dropout, Linear(f*d, d)]."""

    def __init__(self, dim, hidden_factor=2, dropout=0.0, norm_type="LayerNorm"):
        super().__init__()
        norm = RMSNorm(dim, 1e-5) if norm_type == "RMSNorm" else nn.LayerNorm(dim, eps=1e-5)
        self.layers = nn.Sequential(norm, nn.Linear(dim, hidden_factor * dim), nn.GELU(),
                                    nn.Dropout(dropout), nn.Linear(hidden_factor * dim, dim))

    def forward(self, x):
        return x + self.layers(x)


# ---------------------------------------------------------------- checkpoint plan


def section_pieces(mode, num_blocks, every_n=2):
    """(io, [(attn, mlp)] per block) for a mode, as resolve_section in C++."""
    blocks = [[False, False] for _ in range(num_blocks)]
    io = mode == "full"
    if mode == "full":
        blocks = [[True, True] for _ in range(num_blocks)]
    elif mode == "selective":
        for b in blocks:
            b[0] = True
    elif mode == "every_n":
        for i in range(0, num_blocks, every_n):
            blocks[i] = [True, True]
    elif mode != "none":
        raise ValueError(f"unknown checkpoint mode '{mode}' (none | selective | every_n | full)")
    return io, blocks


def run_piece(fn, x, recompute):
    """Runs one piece; with recompute (and grad on) under non-reentrant checkpoint."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(fn, x, use_reentrant=False)
    return fn(x)


# ---------------------------------------------------------------- sections


class StreamEmbedTransformer(nn.Module):
    """Section `embed` for one stream: [N, token_size, C] -> [N, num_tokens, dim_out]."""

    def __init__(self, num_tokens, token_size, num_channels, dim_embed, dim_out, num_blocks, num_heads,
                 dropout_rate=0.1, norm_type="LayerNorm", embed_size_centroids=0, unembed_mode="block",
                 dropout_final_rate=0.1):
        super().__init__()
        if unembed_mode not in ("block", "full"):
            raise ValueError(f"embed: unknown unembed_mode '{unembed_mode}'")
        self.num_tokens, self.dim_out, self.unembed_mode = num_tokens, dim_out, unembed_mode
        self.embed_size_centroids = embed_size_centroids
        total = num_tokens * dim_out
        self.embed = nn.Linear(token_size, dim_embed)
        self.layers = nn.ModuleList()
        for _ in range(num_blocks):
            self.layers.append(MultiSelfAttentionHead(dim_embed, num_heads, dropout_rate, norm_type))
            self.layers.append(Mlp(dim_embed, 2, dropout_rate, norm_type))
        if unembed_mode == "block":
            # WeatherGenerator widens the centroid part so C divides the rest
            self.e = embed_size_centroids + (total - embed_size_centroids) % num_channels
            d_c = (total - self.e) // num_channels
            if d_c < 1:
                raise ValueError(f"embed: num_tokens*dim_out too small for {num_channels} channels")
            self.unembed = nn.ModuleList([nn.Linear(dim_embed, d_c) for _ in range(num_channels)])
            self.ln_final = nn.ModuleList([nn.LayerNorm(dim_embed, eps=1e-6) for _ in range(num_channels)])
        else:
            self.e = embed_size_centroids
            self.ln_final = nn.LayerNorm(num_channels * dim_embed, eps=1e-3)
            self.unembed = nn.Linear(num_channels * dim_embed, total - self.e)
        if embed_size_centroids > 0:
            self.embed_centroids = nn.Linear(CENTROID_FEATURES, self.e)
        self.dropout_final = nn.Dropout(dropout_final_rate)
        self.set_plan(False, [])

    def set_plan(self, io, blocks):
        """io: input and read-out pieces; blocks: [(attn, mlp)] (missing = False)."""
        self.plan_io = io
        n = len(self.layers) // 2
        self.plan_blocks = [tuple(blocks[i]) if i < len(blocks) else (False, False) for i in range(n)]

    def _input(self, x):
        h = self.embed(x.transpose(-2, -1))  # [N, C, dim_embed]
        return h + harmonic_encoding(h.shape[1], h.shape[2], h.dtype)

    def _readout(self, x):  # [N, C, dim_embed] -> [N, total - e]
        if self.unembed_mode == "full":
            return self.unembed(self.ln_final(x.flatten(-2, -1)))
        per_channel = [u(ln(x[:, c])) for c, (u, ln) in enumerate(zip(self.unembed, self.ln_final))]
        return torch.stack(per_channel, 1).flatten(-2, -1)

    def forward(self, x_in, centroids=None):
        x = run_piece(self._input, x_in, self.plan_io)
        for i, (attn, mlp) in enumerate(self.plan_blocks):
            x = run_piece(self.layers[2 * i], x, attn)
            x = run_piece(self.layers[2 * i + 1], x, mlp)
        out = run_piece(self._readout, x, self.plan_io)
        total = self.num_tokens * self.dim_out
        if self.embed_size_centroids > 0:
            if centroids is None:
                raise ValueError("embed: embed_size_centroids > 0 needs centroids")
            out = torch.cat([out, self.embed_centroids(centroids)], -1)
        if out.shape[-1] < total:
            out = F.pad(out, (0, total - out.shape[-1]))
        return self.dropout_final(out.reshape(-1, self.num_tokens, self.dim_out))


class LatentAdapter(nn.Module):
    """Joins a stream's embeddings into latent tokens (mask token, coords, positions, stream)."""

    def __init__(self, dim_in, dim, num_streams):
        super().__init__()
        self.proj_in = nn.Linear(dim_in, dim)
        self.mask_token = nn.Parameter(torch.randn(dim) * 0.02)
        self.stream_embed = nn.Parameter(torch.randn(num_streams, dim) * 0.02)
        self.embed_coords = nn.Linear(CENTROID_FEATURES, dim)

    def forward(self, emb, visible, centroids, B, T, stream):
        nt, D = emb.shape[1], self.mask_token.shape[0]
        h = self.proj_in(emb)  # [Nv, nt, D]
        tokens = self.mask_token.view(1, 1, D).expand(B * T, nt, D).contiguous().index_copy(0, visible, h)
        tokens = tokens + self.embed_coords(centroids).unsqueeze(1)
        return tokens.reshape(B, T * nt, D) + harmonic_encoding(T * nt, D, tokens.dtype) + self.stream_embed[stream]


class LatentEngine(nn.Module):
    """Section `latent`: attention + MLP blocks over all latent tokens, then ln_out."""

    def __init__(self, dim, num_blocks, num_heads, mlp_hidden_factor=2, dropout_rate=0.1, norm_type="LayerNorm"):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(num_blocks):
            self.layers.append(MultiSelfAttentionHead(dim, num_heads, dropout_rate, norm_type))
            self.layers.append(Mlp(dim, mlp_hidden_factor, dropout_rate, norm_type))
        self.ln_out = nn.LayerNorm(dim, eps=1e-5)
        self.plan_blocks = [(False, False)] * num_blocks

    def forward(self, x):
        for i, (attn, mlp) in enumerate(self.plan_blocks):
            x = run_piece(self.layers[2 * i], x, attn)
            x = run_piece(self.layers[2 * i + 1], x, mlp)
        return self.ln_out(x)


class PredHead(nn.Module):
    """Section `pred` for one stream: LayerNorm, Linear, GELU, Linear (one piece)."""

    def __init__(self, dim_in, hidden, dim_out):
        super().__init__()
        self.layers = nn.Sequential(nn.LayerNorm(dim_in, eps=1e-5), nn.Linear(dim_in, hidden), nn.GELU(),
                                    nn.Linear(hidden, dim_out))
        self.plan_head = False

    def forward(self, x):
        return run_piece(self.layers, x, self.plan_head)


def embed_kwargs(cfg, s):
    """StreamEmbedTransformer arguments of stream s (embed_options in C++)."""
    return dict(num_tokens=s["num_tokens"], token_size=s["token_size"], num_channels=s["num_channels"],
                dim_embed=s["dim_embed"], dim_out=int(cfg["ae_local_dim_embed"]), num_blocks=s["num_blocks"],
                num_heads=s["num_heads"], dropout_rate=float(cfg["embed_dropout_rate"]),
                dropout_final_rate=float(cfg.get("embed_dropout_final_rate", 0.1)),
                norm_type=cfg["norm_type"], embed_size_centroids=int(cfg["embed_size_centroids"]),
                unembed_mode=cfg["embed_unembed_mode"])


class WeatherModel(nn.Module):
    """The whole network; forward returns per-stream predictions [Nm, token_size, C]."""

    def __init__(self, cfg):
        super().__init__()
        D = int(cfg["ae_global_dim_embed"])
        self.embed_engine = nn.Module()
        self.embed_engine.embeds = nn.ModuleDict()
        self.pred_heads = nn.ModuleDict()
        for s in cfg["streams"]:
            self.embed_engine.embeds[s["name"]] = StreamEmbedTransformer(**embed_kwargs(cfg, s))
            self.pred_heads[s["name"]] = PredHead(s["num_tokens"] * D, int(cfg["pred_mlp_hidden_factor"]) * D,
                                                  s["token_size"] * s["num_channels"])
        self.latent_adapter = LatentAdapter(int(cfg["ae_local_dim_embed"]), D, len(cfg["streams"]))
        self.latent_engine = LatentEngine(D, int(cfg["ae_global_num_blocks"]), int(cfg["ae_global_num_heads"]),
                                          int(cfg["ae_global_mlp_hidden_factor"]),
                                          float(cfg["ae_global_dropout_rate"]), cfg["norm_type"])

    def set_mode(self, mode, every_n=2):
        """Applies one checkpoint mode to all three sections (as the C++ plan resolves it)."""
        depth = max([len(e.layers) // 2 for e in self.embed_engine.embeds.values()] + [0])
        io, blocks = section_pieces(mode, depth, every_n)
        for e in self.embed_engine.embeds.values():
            e.set_plan(io, blocks)
        _, self.latent_engine.plan_blocks = section_pieces(mode, len(self.latent_engine.layers) // 2, every_n)
        # the head is block 0 of a one-block section: on when io or its "mlp" is on
        pio, pblocks = section_pieces(mode, 1, every_n)
        for h in self.pred_heads.values():
            h.plan_head = pio or pblocks[0][1]

    def forward(self, batch_size, streams):
        """streams: list of dicts {stream, values, centroids, visible, masked}; list order = stream index."""
        B = batch_size
        parts = []
        for s, si in enumerate(streams):
            _, T, ts, C = si["values"].shape
            x_in = si["values"].reshape(B * T, ts, C).index_select(0, si["visible"])
            cen = si["centroids"].reshape(B * T, -1)
            emb = self.embed_engine.embeds[si["stream"]](x_in, cen.index_select(0, si["visible"]))
            parts.append(self.latent_adapter(emb, si["visible"], cen, B, T, s))
        latent = self.latent_engine(torch.cat(parts, 1))
        preds, offset = [], 0
        for si, part in zip(streams, parts):
            _, T, ts, C = si["values"].shape
            tokens = latent.narrow(1, offset, part.shape[1]).reshape(B * T, -1)
            offset += part.shape[1]
            out = self.pred_heads[si["stream"]](tokens.index_select(0, si["masked"]))
            preds.append(out.view(-1, ts, C))
        return preds


# ---------------------------------------------------------------- loss


def masked_targets(streams):
    """Per stream the values of the masked tokens, [Nm, token_size, C]."""
    out = []
    for si in streams:
        v = si["values"]
        out.append(v.reshape(v.shape[0] * v.shape[1], v.shape[2], v.shape[3]).index_select(0, si["masked"]))
    return out


def masked_loss(cfg, streams, preds, targets):
    """sum_s w_s * sum_terms weight * mean(mse|mae), w_s = loss_weight normalised to sum 1 (MaskedLoss)."""
    weights = {s["name"]: s["loss_weight"] for s in cfg["streams"]}
    total_w = sum(weights.values())
    if total_w <= 0:
        raise ValueError("the streams' loss_weight values sum to 0: nothing to train on")
    terms = [(str(n), float(w)) for n, w in cfg.get("loss_fcts", [["mse", 1.0]])]
    total = None
    for si, p, t in zip(streams, preds, targets):
        w = weights[si["stream"]] / total_w
        if w == 0:
            continue
        diff = p - t
        loss = None
        for name, tw in terms:
            term = diff.abs().mean() if name == "mae" else diff.pow(2).mean()
            loss = tw * term if loss is None else loss + tw * term
        loss = loss * w
        total = loss if total is None else total + loss
    return total
