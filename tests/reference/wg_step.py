"""One training step of the WeatherGenerator twin, as a `wgtrain --dump-step` file (docs/step-dump.md).

Owns: the Batch record the model consumes, reading and writing the step-dump
format (`wgtrain-step-dump/1`), running one step (train mode, dropout 0,
forward, LossPhysical with the training config, backward) and comparing every
`out.*`, the loss and every `grads.*` with a dump.

Reading assumptions (docs/step-dump.md leaves these open):
- `<f>` in batch and `out.pred` names is the absolute forecast step (the index
  into upstream's target lists); the twin needs f in [forecast_offset,
  forecast_offset + forecast_steps] (model keys) and ignores other entries.
  The metadata `forecast_steps` (number of target steps) is only cross-checked.
- A stream whose per-sample tensors are absent has no source tokens / targets
  in that sample; `target_weight` absent means 1; `target_times.<f>` absent
  means one time for every point (one loss sub-step).
- A parameter without a gradient equals a zero gradient: `grads.<name>` absent
  in the dump is compared as zeros with the twin's gradient (None = zeros).
- Tables: hp_nbours must agree exactly; pe_embed / pe_global may differ from the
  twin's in a few entries by one bf16 ulp (sin/cos of one fp32 argument on either
  side of a rounding boundary); then the dump's tables are used, with a warning.
"""
import json
import re
from collections import OrderedDict

import torch

import safetensors_io as st
import wg_config as wc
from wg_layers import set_dropout
from wg_loss import compute_loss
from wg_model import WGModel
from wg_tables import Tables

FORMAT = "wgtrain-step-dump/1"
SAMPLE_FIELDS = ("source_tokens_cells", "source_tokens_lens", "source_centroids",
                 "source_idxs_embed", "source_idxs_embed_pe")


class Batch:
    """B samples × S streams (§2), plus source_cell_lens and target_coords_idxs over global cells."""

    def __init__(self, B, data, source_cell_lens, target_coords_idxs):
        self.B = B
        self.data = data                              # data[b][si]: dict of §2 fields
        self.source_cell_lens = source_cell_lens      # [1 + B*C]
        self.target_coords_idxs = target_coords_idxs  # [si][f]: [1 + B*C]


class DumpError(ValueError):
    pass


def fsteps_of(cfg):
    off = int(cfg["forecast_offset"])
    return list(range(off, off + int(cfg["forecast_steps"]) + 1))


def batch_from_tensors(tensors, cfg, B, dtype=torch.float32):
    """The Batch of a dump's `batch.*` tensors (floating point fields in `dtype`)."""
    streams, C = cfg["streams"], wc.num_cells(cfg)
    fl = lambda t: t.to(dtype)  # noqa: E731
    try:
        scl = tensors["batch.source_cell_lens"].long()
    except KeyError as e:
        raise DumpError("dump lacks batch.source_cell_lens") from e
    tci, data = [], [[None] * len(streams) for _ in range(B)]
    for si, s in enumerate(streams):
        n = s["name"]
        tci.append({f: tensors[f"batch.{n}.target_coords_idxs.{f}"].long() for f in _fsteps_in(tensors, n)})
        for b in range(B):
            p = f"batch.{b}.{n}."
            T, Fs, Ft, Fc = int(s["token_size"]), int(s["sources_size"]), int(s["targets_num_channels"]), int(s["targets_coords_size"])
            d = {"source_tokens_cells": fl(tensors.get(p + "source_tokens_cells", torch.zeros(0, T, Fs))),
                 "source_tokens_lens": tensors.get(p + "source_tokens_lens", torch.zeros(C)).long(),
                 "source_centroids": fl(tensors.get(p + "source_centroids", torch.zeros(0, 5))),
                 "source_idxs_embed": tensors.get(p + "source_idxs_embed", torch.zeros(0)).long(),
                 "source_idxs_embed_pe": tensors.get(p + "source_idxs_embed_pe", torch.zeros(0)).long(),
                 "target_coords": {}, "target_tokens": {}, "target_times": {},
                 "target_weight": float(tensors.get(p + "target_weight", torch.tensor(1.0)))}
            for f in tci[si]:
                d["target_coords"][f] = fl(tensors.get(p + f"target_coords.{f}", torch.zeros(0, Fc)))
                d["target_tokens"][f] = fl(tensors.get(p + f"target_tokens.{f}", torch.zeros(0, Ft)))
                if p + f"target_times.{f}" in tensors:  # optional: the loss's sub-steps
                    d["target_times"][f] = tensors[p + f"target_times.{f}"].long()
            data[b][si] = d
    for si, s in enumerate(streams):
        for f in fsteps_of(cfg):
            if f not in tci[si]:
                raise DumpError(f"dump lacks batch.{s['name']}.target_coords_idxs.{f}")
    return Batch(B, data, scl, tci)


def _fsteps_in(tensors, name):
    pat = re.compile(r"^batch\." + re.escape(name) + r"\.target_coords_idxs\.(\d+)$")
    return sorted(int(m.group(1)) for m in (pat.match(k) for k in tensors) if m)


def batch_tensors(batch, cfg):
    """The `batch.*` tensors of a Batch (integers as I64, floats as F32)."""
    out = OrderedDict()
    out["batch.source_cell_lens"] = batch.source_cell_lens.long()
    for si, s in enumerate(cfg["streams"]):
        for f, t in batch.target_coords_idxs[si].items():
            out[f"batch.{s['name']}.target_coords_idxs.{f}"] = t.long()
    for b in range(batch.B):
        for si, s in enumerate(cfg["streams"]):
            d, p = batch.data[b][si], f"batch.{b}.{s['name']}."
            for k in SAMPLE_FIELDS:
                out[p + k] = d[k] if d[k].is_floating_point() else d[k].long()
            for f in d["target_coords"]:
                out[p + f"target_coords.{f}"] = d["target_coords"][f]
                out[p + f"target_tokens.{f}"] = d["target_tokens"][f]
                if f in d.get("target_times", {}):
                    out[p + f"target_times.{f}"] = d["target_times"][f].long()
            out[p + "target_weight"] = torch.tensor(float(d["target_weight"]))
    return out


def run_step(model, batch, tables):
    """Forward, training loss, backward (train mode, dropout 0). Returns (outs, loss, grads)."""
    if float(model.cfg["impute_latent_noise_std"]) > 0:
        raise DumpError("impute_latent_noise_std > 0 draws noise in training: not reproducible")
    model.train()
    set_dropout(model, 0.0)
    model.zero_grad(set_to_none=True)
    outs = OrderedDict()
    preds = model(batch, tables, outs)
    loss = compute_loss(model.cfg, batch, preds, train=True)
    loss.backward()
    grads = OrderedDict((n, p.grad.detach().clone()) for n, p in model.named_parameters() if p.grad is not None)
    return OrderedDict((k, v.detach()) for k, v in outs.items()), loss.detach(), grads


def write_dump(path, cfg, model, tables, batch, step=0):
    """Runs the step with the model's current weights and writes a dump of it."""
    params = OrderedDict((f"params.{n}", t.detach().clone()) for n, t in model.state_dict().items())
    outs, loss, grads = run_step(model, batch, tables)
    tensors = OrderedDict(params)
    tensors["tables.pe_embed"] = tables["pe_embed"]
    tensors["tables.pe_global"] = tables["pe_global"]
    tensors["tables.hp_nbours"] = tables["hp_nbours"].long()
    tensors.update(batch_tensors(batch, cfg))
    tensors.update(outs)
    tensors["loss"] = loss.reshape(())
    tensors.update((f"grads.{n}", g) for n, g in grads.items())
    meta = {"format": FORMAT, "model": json.dumps(cfg), "batch_size": str(batch.B),
            "num_cells": str(wc.num_cells(cfg)), "forecast_steps": str(len(fsteps_of(cfg))), "step": str(step)}
    st.write(path, tensors, meta)
    return tensors


# ---------------------------------------------------------------- comparison

def compare_tensor(name, got, ref, rtol, atol_rel):
    """Element-wise |got - ref| <= rtol*|ref| + atol_rel*max|ref|; returns a result row."""
    row = {"name": name, "shape": list(ref.shape), "scale": 0.0, "max_abs": 0.0, "rel": 0.0, "ratio": 0.0, "ok": True}
    if got is None:
        got = torch.zeros_like(ref)
    if list(got.shape) != list(ref.shape):
        row.update(ok=False, ratio=float("inf"), note=f"shape {list(got.shape)} vs dump {list(ref.shape)}")
        return row
    if ref.numel() == 0:
        return row
    got, ref = got.double(), ref.double()
    nan_g, nan_r = torch.isnan(got), torch.isnan(ref)
    if not torch.equal(nan_g, nan_r):
        row.update(ok=False, ratio=float("inf"), note="NaN at different places")
        return row
    g, r = got[~nan_r], ref[~nan_r]
    if g.numel() == 0:
        return row
    if not torch.isfinite(g).all() or not torch.isfinite(r).all():
        same = torch.equal(g, r)
        row.update(ok=same, ratio=0.0 if same else float("inf"), note="non-finite values")
        return row
    diff, scale = (g - r).abs(), float(r.abs().max())
    tol = rtol * r.abs() + atol_rel * scale
    ratio = diff / tol.clamp_min(1e-300)
    ratio = torch.where(diff == 0, torch.zeros_like(ratio), ratio)
    i = int(torch.argmax(ratio))
    row.update(scale=scale, max_abs=float(diff.max()), rel=float(diff[i] / max(float(r[i].abs()), 1e-300)),
               ratio=float(ratio[i]), ok=bool(ratio[i] <= 1.0))
    return row


def compare_tables(own, dumped):
    """(tables to use, problems, warnings)."""
    use, problems, warns = dict(own), [], []
    for k, mine in own.items():
        key = f"tables.{k}"
        if key not in dumped:
            warns.append(f"{key} absent from the dump: the twin's own table is used")
            continue
        theirs = dumped[key]
        if list(theirs.shape) != list(mine.shape):
            problems.append(f"{key}: shape {list(theirs.shape)} vs twin {list(mine.shape)}")
            continue
        if k == "hp_nbours":
            if not torch.equal(theirs.long(), mine.long()):
                problems.append(f"{key}: {int((theirs.long() != mine.long()).sum())} entries differ")
            continue
        theirs = theirs.float()
        bad = theirs != mine
        n = int(bad.sum())
        if n == 0:
            continue
        # one bf16 ulp of the larger magnitude (8 significant bits)
        ulp = torch.maximum(theirs.abs(), mine.abs()) * 2.0 ** -7
        if bool(((theirs - mine).abs()[bad] <= ulp[bad]).all()) and n <= max(1, mine.numel() // 10000):
            warns.append(f"{key}: {n} of {mine.numel()} entries differ by one bf16 ulp: the dump's table is used")
            use[k] = theirs
        else:
            problems.append(f"{key}: {n} of {mine.numel()} entries differ (beyond isolated one-ulp ties)")
    return use, problems, warns


def batch_problems(batch, cfg):
    """Consistency of the dumped batch: per-cell lengths vs source_cell_lens and the token counts."""
    C, S, problems = wc.num_cells(cfg), len(cfg["streams"]), []
    if batch.source_cell_lens.numel() != 1 + batch.B * C:
        return [f"batch.source_cell_lens has {batch.source_cell_lens.numel()} entries, expected {1 + batch.B * C}"]
    per = torch.stack([sum(batch.data[b][si]["source_tokens_lens"] for si in range(S)) for b in range(batch.B)])
    if not torch.equal(per.reshape(-1), batch.source_cell_lens[1:]):
        problems.append("batch.source_cell_lens != Σ_streams source_tokens_lens per global cell")
    for b in range(batch.B):
        for si, s in enumerate(cfg["streams"]):
            d = batch.data[b][si]
            if int(d["source_tokens_lens"].sum()) != d["source_tokens_cells"].shape[0]:
                problems.append(f"batch.{b}.{s['name']}: source_tokens_lens does not sum to the token count")
    return problems


def read_dump(path):
    tensors, meta = st.read(path)
    if meta.get("format") != FORMAT:
        raise DumpError(f"{path}: format '{meta.get('format')}', expected '{FORMAT}'")
    cfg = wc.model_config(json.loads(meta["model"]))
    B = int(meta["batch_size"])
    if int(meta["num_cells"]) != wc.num_cells(cfg):
        raise DumpError(f"num_cells {meta['num_cells']} does not match healpix_level {cfg['healpix_level']}")
    if "forecast_steps" in meta and int(meta["forecast_steps"]) != len(fsteps_of(cfg)):
        print(f"warning: metadata forecast_steps {meta['forecast_steps']} vs {len(fsteps_of(cfg))} "
              f"predicted steps from the model keys")
    return tensors, meta, cfg, B


def check_dump(path, rtol=1e-5, atol_rel=1e-6, show=12, out=print):
    """Runs the dumped step in the twin and compares. Returns 0 (agree) or 1 (mismatch)."""
    tensors, meta, cfg, B = read_dump(path)
    model = WGModel(cfg)
    # A float64 dump (wgtrain --dump-step-dtype f64) is checked in float64 throughout.
    dtype = torch.float64 if any(k.startswith("params.") and v.dtype == torch.float64
                                 for k, v in tensors.items()) else torch.float32
    if dtype == torch.float64:
        model.double()
    params = OrderedDict((k[len("params."):], v.to(dtype)) for k, v in tensors.items() if k.startswith("params."))
    try:  # by state_dict name, no mapping; prints every missing / unexpected name or shape
        model.load_state_dict(params, strict=True)
    except RuntimeError as e:
        out(f"MISMATCH: params.* do not load into the model: {e}")
        out("FAIL: params")
        return 1
    if list(params) != list(model.state_dict()):
        out("warning: params.* are not in the model's state_dict order")
    tables, problems, warns = compare_tables(Tables(cfg).as_dict(), tensors)
    for w in warns:
        out(f"warning: {w}")
    tables = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in tables.items()}
    batch = batch_from_tensors(tensors, cfg, B, dtype)
    problems += batch_problems(batch, cfg)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        outs, loss, grads = run_step(model, batch, tables)
    finally:
        torch.set_default_dtype(default_dtype)
    rows = []
    for k, ref in tensors.items():
        if k.startswith("out."):
            rows.append(compare_tensor(k, outs.get(k), ref, rtol, atol_rel)
                        if k in outs else {"name": k, "ok": False, "ratio": float("inf"), "note": "not produced by the twin",
                                           "shape": list(ref.shape), "scale": 0, "max_abs": 0, "rel": 0})
    for k in outs:
        if k not in tensors:
            out(f"warning: the twin produces {k}, the dump has no such tensor")
    if "loss" not in tensors:
        problems.append("dump lacks loss")
    else:
        rows.append(compare_tensor("loss", loss.reshape(tensors["loss"].shape), tensors["loss"], rtol, atol_rel))
    for n, p in model.named_parameters():
        ref = tensors.get(f"grads.{n}")
        mine = grads.get(n)
        if ref is None and mine is None:
            continue
        ref = torch.zeros_like(p) if ref is None else ref
        rows.append(compare_tensor(f"grads.{n}", mine, ref, rtol, atol_rel))
    names = set(n for n, _ in model.named_parameters())
    for k in tensors:
        if k.startswith("grads.") and k[len("grads."):] not in names:
            problems.append(f"{k}: no such parameter")
    bad = [r for r in rows if not r["ok"]]
    rows.sort(key=lambda r: -r["ratio"])
    out(f"compared {len(rows)} tensors (rtol {rtol:g}, floor {atol_rel:g}·max|ref|); worst {min(show, len(rows))}:")
    out(f"{'tensor':<72} {'max|ref|':>10} {'max|diff|':>10} {'rel@worst':>10} {'/tol':>8}")
    for r in rows[:show] + [r for r in bad if r not in rows[:show]]:
        out(f"{r['name'][:72]:<72} {r['scale']:10.3e} {r['max_abs']:10.3e} {r['rel']:10.3e} {r['ratio']:8.3f}"
            + ("" if r["ok"] else "  MISMATCH") + (f"  ({r['note']})" if r.get("note") else ""))
    for p in problems:
        out(f"MISMATCH: {p}")
    if bad or problems:
        out(f"FAIL: {len(bad) + len(problems)} mismatch(es): " + ", ".join([r["name"] for r in bad] + problems))
        return 1
    out("PASS")
    return 0
