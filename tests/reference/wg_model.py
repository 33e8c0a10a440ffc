"""The WeatherGenerator model twin (wg-model.md §4, §6), fp32 reference numerics (§7).

Owns: the module tree with upstream's state_dict names, shapes and order
(§6.1), the construction (RNG) order and init of §6.4, and the forward of §4
(Appendix A) for B >= 1 samples laid out as docs/step-dump.md says: sample b's
cell c is the global cell g = b*C + c, attention never mixes samples, the
aggregation runs over each sample's own non-empty cells and the prediction
gathers each sample's own neighbours. For B = 1 this is upstream's step.

The batch is a `wg_step.Batch` (fields of §2 per sample and stream); the tables
come from wg_tables.Tables (or from a dump). Building blocks: wg_layers.py.

Activation recomputation (optional, off by default): the forward is cut into the
same pieces as the C++ model (include/wg/plan/piece_key.h, model_pieces in
src/plan/recompute_plan.cpp), keyed by the same strings ("embed.ERA5/input",
"ae_adapter/block0.cross", "pred.ERA5/head", ...). WGModel.set_recompute(keys)
runs those pieces under torch.utils.checkpoint (use_reentrant=False,
preserve_rng_state=True); resolve_plan() selects the keys of a mode per section
as the C++ plan does (none, full, selective, every_n). The pieces and the plan:
wg_pieces.py.
"""
import math

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint as _checkpoint

import wg_config as wc
from wg_layers import (MLP, Lin, LNa, MultiCrossAttentionHeadVarlen, MultiCrossAttentionHeadVarlenSlicedQ,
                       MultiSelfAttentionHead, MultiSelfAttentionHeadVarlen, Segments, block_segments)
from wg_pieces import model_pieces, resolve_plan
from wg_tables import PE_EMBED_ROWS

EMBED_NORM_EPS = 1e-5        # embed MHSA / MLP: constructor default, not norm_eps (§4.3, §6.2)
LN_FINAL_EPS_BLOCK = 1e-6    # embed read-out ln_final.i (§6.2)
LN_FINAL_EPS_FULL = 1e-3     # full-mode ln_final (§4.3)
EMBED_DROPOUT_FINAL = 0.1    # hard-coded upstream (§1.1)
PRED_DROPOUT = 0.1           # prediction engine rates are hard-coded (§13.11)
FORECAST_INIT_STD = 1e-3     # forecast engine Linear weights and biases N(0, 0.001) (§4.8)


def _run_plain(_key, fn, *args):
    return fn(*args)


def harmonic_pe(length, dim, dtype=torch.float32):
    """Embed PE (§4.3 step 2), base 10000, computed in the dtype of H (fp32 in the reference)."""
    pos = torch.arange(length, dtype=dtype)
    div = torch.exp(torch.arange(0, dim, 2, dtype=dtype) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, dtype=dtype)
    pe[:, 0::2] = torch.sin(pos[:, None] * div[None, :])
    pe[:, 1::2] = torch.cos(pos[:, None] * div[None, :])
    return pe


class StreamEmbedTransformer(nn.Module):
    """§4.3 channels mode: each of the F_src features (across the T points) is a sequence element."""

    def __init__(self, cfg, s):
        super().__init__()
        E, heads = int(s["embed"]["dim_embed"]), int(s["embed"]["num_heads"])
        ch, T, dout = int(s["sources_size"]), int(s["token_size"]), int(cfg["ae_local_dim_embed"])
        p = float(cfg["embed_dropout_rate"])
        self.mode, self.num_channels, self.dim_out = cfg["embed_unembed_mode"], ch, dout
        self.embed_size_centroids = int(cfg["embed_size_centroids"])  # the stored value (§13.3)
        layers = []
        for _ in range(int(s["embed"]["num_blocks"])):
            layers.append(MultiSelfAttentionHead(E, heads, dropout_rate=p, with_qk_lnorm=True,
                                                 norm_eps=EMBED_NORM_EPS))
            layers.append(MLP(E, E, 2, dropout_rate=p, with_residual=True, norm_eps=EMBED_NORM_EPS))
        self.layers = nn.ModuleList(layers)
        self.embed = Lin(T, E)
        if self.mode == "block":
            rem, w, esc_local = wc.unembed_layout(cfg, s)
            self.unembed = nn.ModuleList([Lin(E, w) for _ in range(ch)])
            self.ln_final = nn.ModuleList([LNa(E, LN_FINAL_EPS_BLOCK) for _ in range(ch)])
        elif self.mode == "full":
            # Open point: the spec does not say whether full mode registers ln_final or
            # unembed first; this twin keeps block mode's order (unembed, then ln_final).
            esc_local = self.embed_size_centroids
            self.unembed = Lin(ch * E, dout - esc_local)
            self.ln_final = LNa(ch * E, LN_FINAL_EPS_FULL)
        else:
            raise NotImplementedError(f"embed_unembed_mode {self.mode}")
        self.dropout_final = nn.Dropout(EMBED_DROPOUT_FINAL)
        # §13.3: sized with the locally modified value (76 by default), never called
        # while the stored embed_size_centroids is 0: dead parameters kept for the state_dict.
        self.embed_centroids = Lin(5, esc_local)

    def embed_input(self, x):
        """Piece `input`: the embed Linear and the positional encoding, [N, T, F_src] -> [N, F_src, E]."""
        h = self.embed(x.transpose(1, 2))
        return h + harmonic_pe(h.shape[1], h.shape[2], h.dtype)

    def readout(self, h):
        """Piece `readout`: [N, F_src, E] -> [N, F_src * w] (block) or [N, dim_out - esc] (full)."""
        if self.mode == "block":
            # vectorised read-out: LN without affine, then the per-channel affine and Linear
            hn = nn.functional.layer_norm(h, (h.shape[-1],), eps=LN_FINAL_EPS_BLOCK)
            gamma = torch.stack([m.weight for m in self.ln_final])
            beta = torch.stack([m.bias for m in self.ln_final])
            hn = hn * gamma + beta
            w = torch.stack([m.weight for m in self.unembed])          # [F_src, w, E]
            b = torch.stack([m.bias for m in self.unembed])            # [F_src, w]
            return (torch.einsum("nce,cwe->ncw", hn, w) + b).flatten(1)   # channel order
        return self.unembed(self.ln_final(h.flatten(1)))

    def forward(self, x, centroids, run=_run_plain, section=""):
        """x [N, T, F_src] -> [N, dim_out]. run(key, fn, *args): the model's piece runner,
        section: the pieces' section label ("embed.<stream>")."""
        h = run(f"{section}/input", self.embed_input, x)                 # [N, F_src, E]
        for i, layer in enumerate(self.layers):
            h = run(f"{section}/block{i // 2}.{'mlp' if isinstance(layer, MLP) else 'attn'}", layer, h)
        y = run(f"{section}/readout", self.readout, h)
        if self.embed_size_centroids > 0:
            y = torch.cat([y, self.embed_centroids(centroids)], dim=1)
        else:
            y = nn.functional.pad(y, (0, self.dim_out - y.shape[1]))  # zero lanes on the right
        return self.dropout_final(y)


def run_blocks(blocks, x, aux=None, segments_for=None, run=_run_plain, section=""):
    """Alternating attention / MLP blocks (local, aggregation, global, forecast engines).

    segments_for(block): the packed-row Segments an attention block attends within
    (aggregation: each sample's non-empty cells); None: dense over [B, L].
    run, section: the piece runner and section label (pieces block<i>.attn, block<i>.mlp).
    """
    for j, blk in enumerate(blocks):
        key = f"{section}/block{j // 2}.{'mlp' if isinstance(blk, MLP) else 'attn'}"
        if isinstance(blk, MLP):
            x = run(key, lambda t, blk=blk: blk(t, aux), x)
        elif segments_for is not None:
            segs = segments_for(blk)
            x = run(key, lambda t, blk=blk, segs=segs: blk(t, aux, segments=segs), x)
        else:
            x = run(key, lambda t, blk=blk: blk(t, aux), x)
    return x


def attn_mlp_blocks(cfg, num_blocks, dim, num_heads, dense_every_, block_factor, hidden,
                    dropout, qk, dim_aux=None, last_dense=None):
    mods = []
    for i in range(num_blocks):
        dense = (i % dense_every_ == 0) or (i == (num_blocks - 1 if last_dense is None else last_dense))
        mods.append(MultiSelfAttentionHead(dim, num_heads, dropout_rate=dropout, with_qk_lnorm=qk,
                                           norm_eps=cfg["norm_eps"], dim_aux=dim_aux,
                                           local_block=0 if dense else block_factor))
        mods.append(MLP(dim, dim, hidden, dropout_rate=dropout, with_residual=True,
                        norm_eps=cfg["mlp_norm_eps"], dim_aux=dim_aux))
    return nn.ModuleList(mods)


class EnsPredictionHead(nn.Module):
    """§4.9 pred_heads.<s>: per member Lin(...)[, GELU, Lin]*, activation; output [ens, P, out]."""

    ACTIVATIONS = {"identity": nn.Identity, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU,
                   "relu": nn.ReLU, "leakyrelu": nn.LeakyReLU, "elu": nn.ELU, "selu": nn.SELU,
                   "softplus": nn.Softplus, "silu": nn.SiLU, "swish": nn.SiLU}

    def __init__(self, dim_in, dim_out, num_layers, ens_size, final_activation):
        super().__init__()
        act = self.ACTIVATIONS.get(str(final_activation or "Identity").lower())
        if act is None:
            raise NotImplementedError(f"pred_head final_activation {final_activation}")
        members = []
        for _ in range(int(ens_size)):
            mods = [Lin(dim_in, dim_out if num_layers == 1 else 2 * dim_in)]
            for i in range(int(num_layers) - 1):
                mods += [nn.GELU(), Lin(2 * dim_in, dim_out if i == num_layers - 2 else 2 * dim_in)]
            mods.append(act())
            members.append(nn.Sequential(*mods))
        self.pred_heads = nn.ModuleList(members)

    def forward(self, x):
        return torch.stack([m(x) for m in self.pred_heads])


class NamedLinear(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.linear = Lin(i, o, bias=False)

    def forward(self, x):
        return self.linear(x)


class TargetPredictionEngineClassic(nn.Module):
    """§4.9: per layer (cross, [self], MLP) with AdaLN on the target coordinates."""

    def __init__(self, cfg, s, heads):
        super().__init__()
        dims, tr = wc.dims_embed(cfg, s), s["target_readout"]
        a, Dg = int(s["targets_coords_size"]), int(cfg["ae_global_dim_embed"])
        residual_mlp = bool(cfg["pred_dyadic_dims"]) or tr["type"] == "obs_value"
        mods = []
        for l in range(len(dims) - 1):
            mods.append(MultiCrossAttentionHeadVarlen(
                dims[l], Dg, heads, dim_head_proj=tr.get("dim_head_proj"), dropout_rate=PRED_DROPOUT,
                with_qk_lnorm=True, norm_eps=cfg["norm_eps"], dim_aux=a, with_residual=True,
                softcap=tr.get("softcap") or 0.0))
            if cfg["pred_self_attention"]:
                mods.append(MultiSelfAttentionHeadVarlen(dims[l], heads, dropout_rate=PRED_DROPOUT,
                                                         with_qk_lnorm=True, norm_eps=cfg["norm_eps"],
                                                         dim_aux=a))
            mods.append(MLP(dims[l], dims[l + 1], tr.get("mlp_hidden_factor") or 2, dropout_rate=PRED_DROPOUT,
                            with_residual=residual_mlp, norm_eps=cfg["mlp_norm_eps"],
                            dim_aux=a if cfg["pred_mlp_adaln"] else None))
        self.tte = nn.ModuleList(mods)

    def forward(self, e, latent, q_segs, kv_segs, kv_index, aux, run=_run_plain, section=""):
        layer = 0
        for blk in self.tte:
            if isinstance(blk, MultiSelfAttentionHeadVarlen):
                e = run(f"{section}/block{layer}.attn", lambda t, blk=blk: blk(t, q_segs, ada_ln_aux=aux), e)
            elif isinstance(blk, MLP):
                e = run(f"{section}/block{layer}.mlp", lambda t, blk=blk: blk(t, aux), e)
                layer += 1
            else:
                e = run(f"{section}/block{layer}.cross", lambda t, lat, blk=blk: blk(
                    t, lat, q_segs, kv_segs, ada_ln_aux=aux, kv_index=kv_index), e, latent)
        return e


class WGModel(nn.Module):
    """Model.create (§6): children registered in upstream's order, built in its RNG order."""

    def __init__(self, cfg):
        super().__init__()
        wc.check_supported(cfg)
        self.cfg = cfg
        Dl, Dg, nq = int(cfg["ae_local_dim_embed"]), int(cfg["ae_global_dim_embed"]), int(cfg["ae_local_num_queries"])
        self.num_cells, self.nq, self.dim_global = wc.num_cells(cfg), nq, Dg
        streams = cfg["streams"]
        # -- embed engine
        self.embed_engine = nn.Module()
        self.embed_engine.embeds = nn.ModuleDict()
        for s in streams:
            diag = s.get("diagnostic") or int(s["sources_size"]) == 0
            self.embed_engine.embeds[s["name"]] = nn.Identity() if diag else StreamEmbedTransformer(cfg, s)
        # -- local engine
        self.ae_local_engine = nn.Module()
        blocks = []
        for _ in range(int(cfg["ae_local_num_blocks"])):
            blocks.append(MultiSelfAttentionHeadVarlen(Dl, cfg["ae_local_num_heads"], cfg["ae_local_dropout_rate"],
                                                       cfg["ae_local_with_qk_lnorm"], cfg["norm_eps"]))
            blocks.append(MLP(Dl, Dl, 2, cfg["ae_local_dropout_rate"], True, cfg["mlp_norm_eps"]))
        self.ae_local_engine.ae_local_blocks = nn.ModuleList(blocks)
        # -- local -> global adapter
        self.ae_local_global_engine = nn.Module()
        sliced = lambda: MultiCrossAttentionHeadVarlenSlicedQ(  # noqa: E731
            Dg, Dl, nq, cfg["ae_adapter_num_heads"], cfg["ae_adapter_embed"], cfg["ae_adapter_dropout_rate"],
            cfg["ae_adapter_with_qk_lnorm"], cfg["norm_eps"], cfg["ae_adapter_with_residual"])
        a0 = sliced()
        a1 = MLP(Dg, Dg, 2, cfg["ae_adapter_dropout_rate"], True, cfg["mlp_norm_eps"])
        self.ae_local_global_engine.ae_adapter = nn.ModuleList([a0, a1, sliced()])
        # -- learnable queries (own parameter: first in the state_dict whatever the draw order)
        self.q_cells = nn.Parameter(torch.rand(1, nq, Dg, device=a1.layers[1].weight.device) / Dg)
        # -- aggregation, global
        self.ae_aggregation_engine = nn.Module()
        self.ae_aggregation_engine.ae_aggregation_blocks = attn_mlp_blocks(
            cfg, int(cfg["ae_aggregation_num_blocks"]), Dg, cfg["ae_aggregation_num_heads"],
            wc.dense_every(cfg["ae_aggregation_att_dense_rate"]), int(cfg["ae_aggregation_block_factor"]),
            cfg["ae_aggregation_mlp_hidden_factor"], cfg["ae_aggregation_dropout_rate"],
            cfg["ae_aggregation_with_qk_lnorm"])
        self.ae_global_engine = nn.Module()
        self.ae_global_engine.ae_global_blocks = attn_mlp_blocks(
            cfg, int(cfg["ae_global_num_blocks"]), Dg, cfg["ae_global_num_heads"],
            wc.dense_every(cfg["ae_global_att_dense_rate"]), int(cfg["ae_global_block_factor"]),
            cfg["ae_global_mlp_hidden_factor"], cfg["ae_global_dropout_rate"], cfg["ae_global_with_qk_lnorm"])
        # -- forecast engine (§4.8); the dense test compares with ae_global_num_blocks [sic, §13.12]
        self.forecast_engine = nn.Module()
        if cfg["forecast_policy"] is not None and int(cfg["fe_num_blocks"]) > 0:
            fe = attn_mlp_blocks(cfg, int(cfg["fe_num_blocks"]), Dg, cfg["fe_num_heads"],
                                 wc.dense_every(cfg["forecast_att_dense_rate"]), int(cfg["ae_global_block_factor"]),
                                 2, cfg["fe_dropout_rate"], cfg["fe_with_qk_lnorm"], dim_aux=1,
                                 last_dense=int(cfg["ae_global_num_blocks"]) - 1)
            for m in fe.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0.0, FORECAST_INIT_STD)
                    if m.bias is not None:  # attention projections have none
                        nn.init.normal_(m.bias, 0.0, FORECAST_INIT_STD)
        else:
            fe = nn.ModuleList()
        self.forecast_engine.fe_blocks = fe
        # -- per stream: coordinate embedding, prediction engine, head (interleaved, §6.4)
        self.embed_target_coords = nn.ModuleDict()
        self.target_token_engines = nn.ModuleDict()
        self.pred_adapter_kv = nn.ModuleDict()
        self.pred_heads = nn.ModuleDict()
        heads = int(streams[0]["target_readout"]["num_heads"])  # streams[0] for all (§13.11)
        for s in streams:
            dims = wc.dims_embed(cfg, s)
            self.embed_target_coords[s["name"]] = NamedLinear(s["targets_coords_size"], dims[0])
            self.target_token_engines[s["name"]] = TargetPredictionEngineClassic(cfg, s, heads)
            self.pred_adapter_kv[s["name"]] = nn.Identity()
            ph = s["pred_head"]
            self.pred_heads[s["name"]] = EnsPredictionHead(dims[-1], s["targets_num_channels"],
                                                           int(ph["num_layers"]), int(ph["ens_size"]),
                                                           ph.get("final_activation"))
        self.recompute = frozenset()   # piece keys run under checkpoint (set_recompute)

    # ------------------------------------------------------------ recomputation

    def pieces(self):
        return model_pieces(self.cfg)

    def set_recompute(self, keys):
        """Runs the pieces `keys` (strings, see model_pieces) under torch.utils.checkpoint
        (use_reentrant=False, preserve_rng_state=True); an empty set turns it off."""
        known = set(str(p) for p in self.pieces())
        keys = frozenset(str(k) for k in keys)
        unknown = sorted(keys - known)
        if unknown:
            raise ValueError(f"no such piece(s) in this model: {unknown}")
        self.recompute = keys

    def set_recompute_mode(self, sections):
        """set_recompute(resolve_plan(pieces, sections)); returns the number of pieces recomputed."""
        keys = resolve_plan(self.pieces(), sections)
        self.set_recompute(keys)
        return len(keys)

    def _run(self, key, fn, *args):
        if key in self.recompute and torch.is_grad_enabled():
            return _checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True)
        return fn(*args)

    # ------------------------------------------------------------ forward pieces

    def embed_cells(self, batch, tables):
        """§4.3: the cell-ordered token buffer [M, D_l] (embedded tokens + pe_embed)."""
        M = int(batch.source_cell_lens[1:].sum())
        vals, idxs = [], []
        for b in range(batch.B):
            for si, s in enumerate(self.cfg["streams"]):
                d = batch.data[b][si]
                x = d["source_tokens_cells"]
                if x.shape[0] == 0 or isinstance(self.embed_engine.embeds[s["name"]], nn.Identity):
                    continue
                pe_idx = d["source_idxs_embed_pe"].long()
                if int(pe_idx.max()) >= PE_EMBED_ROWS:  # errata 7: a clear error, not an overrun
                    raise ValueError(f"sample {b} stream {s['name']}: a cell has more than "
                                     f"{PE_EMBED_ROWS} source tokens (pe_embed has {PE_EMBED_ROWS} rows)")
                y = self.embed_engine.embeds[s["name"]](x, d["source_centroids"], run=self._run,
                                                        section=f"embed.{s['name']}")
                vals.append(y + tables["pe_embed"][pe_idx])
                idxs.append(d["source_idxs_embed"].long())
        Dl = int(self.cfg["ae_local_dim_embed"])
        dtype = self.q_cells.dtype
        if not vals:
            return torch.zeros(M, Dl, dtype=dtype)
        idx = torch.cat(idxs)
        if idx.numel() != M or not torch.equal(torch.sort(idx).values, torch.arange(M)):
            raise ValueError("source_idxs_embed is not a permutation of the token buffer rows")
        return torch.zeros(M, Dl, dtype=dtype).index_copy(0, idx, torch.cat(vals))

    def assimilate_local(self, tokens, batch, tables, out):
        """§4.4-4.6 -> [B, C*nq, D_g]; all cells at once (the upstream chunking is per cell, neutral)."""
        B, C, nq, Dg = batch.B, self.num_cells, self.nq, self.dim_global
        lens = batch.source_cell_lens[1:].long()
        if lens.numel() != B * C:
            raise ValueError(f"source_cell_lens has {lens.numel()} cells, expected B*C = {B * C}")
        x = tokens
        if x.shape[0] > 0:  # upstream would run (and fail) on an empty chunk; skip it (errata 8)
            segs = Segments(lens)
            for j, blk in enumerate(self.ae_local_engine.ae_local_blocks):
                if isinstance(blk, MultiSelfAttentionHeadVarlen):
                    x = self._run(f"ae_local/block{j // 2}.attn", lambda t, blk=blk: blk(t, segs), x)
                else:
                    x = self._run(f"ae_local/block{j // 2}.mlp", blk, x)
        out["out.ae_local"] = x
        pe_g = tables["pe_global"]
        Q0 = (self.q_cells.repeat(C, 1, 1) + pe_g).repeat(B, 1, 1)        # [B*C, nq, Dg]
        mask = lens > 0
        rows = torch.nonzero(mask).squeeze(1)
        Qu = Q0[rows]
        if rows.numel() > 0:
            q_segs, kv_segs = Segments(torch.ones(rows.numel(), dtype=torch.int64)), Segments(lens[rows])
            a = self.ae_local_global_engine.ae_adapter
            cross = lambda blk: lambda q, kv: blk(q, kv, q_segs, kv_segs)  # noqa: E731
            Qu = self._run("ae_adapter/block0.cross", cross(a[0]), Qu, x)
            Qu = self._run("ae_adapter/block0.mlp", a[1], Qu)
            Qu = self._run("ae_adapter/block1.cross", cross(a[2]), Qu, x)
        out["out.ae_adapter"] = Qu
        per_sample = mask.view(B, C).sum(1)       # each sample's non-empty cells form one sequence
        if rows.numel() > 0:
            dense_segs = Segments(per_sample)
            Qu = run_blocks(self.ae_aggregation_engine.ae_aggregation_blocks, Qu, segments_for=lambda blk:
                            dense_segs if blk.local_block == 0 else block_segments(per_sample, blk.local_block),
                            run=self._run, section="ae_aggregation")
        out["out.ae_aggregation"] = Qu
        G = Q0.index_put((rows,), Qu.to(Q0.dtype))  # bf16 under autocast when no float32 residual promoted it
        return (G.view(B, C, nq, Dg) + pe_g).flatten(1, 2)

    def predict(self, fstep, G, batch, tables, preds):
        """§4.9 for every stream at forecast step fstep; preds[name][fstep] = [ens, P_total, F_tgt]."""
        B, C, nq = batch.B, self.num_cells, self.nq
        latent = G.reshape(B * C * nq, self.dim_global)
        cells = (torch.arange(B)[:, None, None] * C + tables["hp_nbours"].long()[None]).reshape(-1)  # [B*C*9]
        kv_index = (cells[:, None] * nq + torch.arange(nq)[None]).reshape(-1)                       # (cell, slot)
        kv_segs = Segments(torch.full((B * C,), 9 * nq, dtype=torch.int64))
        for si, s in enumerate(self.cfg["streams"]):
            name, F = s["name"], int(s["targets_num_channels"])
            ens = int(s["pred_head"]["ens_size"])
            tc = torch.cat([batch.data[b][si]["target_coords"][fstep] for b in range(B)])
            qlens = batch.target_coords_idxs[si][fstep][1:].long()
            if qlens.numel() != B * C or int(qlens.sum()) != tc.shape[0]:
                raise ValueError(f"stream {name} fstep {fstep}: target_coords_idxs does not match target_coords")
            empty = torch.zeros(ens, 0, F, dtype=G.dtype)
            if tc.shape[0] == 0:
                preds[name][fstep] = empty
                continue
            e = self._run(f"pred.{name}/input", self.embed_target_coords[name], tc)
            if torch.isnan(e).any():  # upstream logs and skips the stream
                preds[name][fstep] = empty
                continue
            e = self.target_token_engines[name](e, latent, Segments(qlens), kv_segs, kv_index, tc,
                                                run=self._run, section=f"pred.{name}")
            preds[name][fstep] = self._run(f"pred.{name}/head", self.pred_heads[name], e)

    def forward(self, batch, tables, out=None):
        """Returns {stream name: {fstep: [ens, P_total, F_tgt]}}; `out` collects the out.* tensors."""
        out = {} if out is None else out
        tokens = self.embed_cells(batch, tables)
        out["out.embed"] = tokens
        G = self.assimilate_local(tokens, batch, tables, out)
        G = run_blocks(self.ae_global_engine.ae_global_blocks, G, run=self._run, section="ae_global")
        out["out.ae_global"] = G
        preds = {s["name"]: {} for s in self.cfg["streams"]}
        off, steps = int(self.cfg["forecast_offset"]), int(self.cfg["forecast_steps"])
        std = float(self.cfg["impute_latent_noise_std"])
        for fstep in range(off, off + steps):
            self.predict(fstep, G, batch, tables, preds)
            if self.training and std > 0.0:
                G = G + torch.randn_like(G) * torch.linalg.norm(G) * std
            aux = torch.tensor([float(fstep)], dtype=G.dtype)
            G = run_blocks(self.forecast_engine.fe_blocks, G, aux, run=self._run, section="forecast")
            out[f"out.forecast.{fstep}"] = G
        self.predict(off + steps, G, batch, tables, preds)
        for name, per in preds.items():
            for f, p in per.items():
                out[f"out.pred.{name}.{f}"] = p
        return preds
