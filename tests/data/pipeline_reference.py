#!/usr/bin/env python3
"""An independent numpy reference of WeatherGenerator's tokeniser, masking
application, targets and batch layout, written from wg-data.md (§2, §4-§7,
§10) for the C++ tests (tests/data/test_pipeline_*.cpp), with upstream's
HEALPix library (Debian python3-astropy-healpix) and numpy only. Masks and
random draws are inputs written by the C++ side, so the comparison does not
depend on a random generator; every rule that turns them into tokens and
targets is here.

Usage:
  pipeline_reference.py run DIR      DIR/manifest.json names the point sets
                                     (.npy) and cases; outputs DIR/<case>.*.npy
  pipeline_reference.py tables LEVEL OUT_DIR
                                     HEALPix tables of §2.3-2.5 as .npy
  pipeline_reference.py cells LEVEL IN_DIR
                                     cell of IN_DIR/lat.npy, lon.npy -> cells.npy
  pipeline_reference.py bench DIR REPEATS
                                     time the "bench" case of DIR, print JSON
"""
import json
import os
import sys
import time

import numpy as np

from healpix_reference import F32, PI32, Tables, cell_of, s2tor3, theta_phi32

DEG2RAD32 = F32(np.pi / 180.0)


# ---------------------------------------------------------- per-point features

def calendar(times):
    t = np.asarray(times, dtype=np.int64).astype("datetime64[s]")
    year = t.astype("datetime64[Y]")
    day = t.astype("datetime64[D]")
    years = year.astype(np.int64) + 1970
    doy = (day - year.astype("datetime64[D]")).astype(np.int64) + 1
    minute = (t - day.astype("datetime64[s]")).astype("timedelta64[m]").astype(np.int64)
    return years, doy, minute


def phase32(times, w_start):
    s = np.mod(np.asarray(times, dtype=np.int64) - np.int64(w_start), 86400).astype(F32)
    return ((s / F32(43200.0)) * F32(2.0)) * PI32


def source_features(tab, lat, lon, cells, times, w_start):
    """Columns 1..7 of §4.2 for every point. -> [N, 7] float32"""
    years, doy, minute = calendar(times)
    a = phase32(times, w_start)
    theta, phi = theta_phi32(lat, lon)
    P = s2tor3(theta, phi)                               # float32
    Pl = np.einsum("nij,nj->ni", tab.R[4][cells], P)     # float32
    lat_l = np.arctan2(Pl[:, 2], np.sqrt(Pl[:, 0] ** 2 + Pl[:, 1] ** 2))
    lon_l = np.arctan2(Pl[:, 1], Pl[:, 0])
    out = np.empty((len(lat), 7), dtype=F32)
    out[:, 0] = years.astype(F32) / F32(2100.0)
    out[:, 1] = doy.astype(F32) / F32(365.0)
    out[:, 2] = minute.astype(F32) / F32(1440.0)
    out[:, 3] = np.sin(a)
    out[:, 4] = np.cos(a)
    # §12.1: radians treated as degrees, reproduced.
    out[:, 5] = np.sin(lat_l * DEG2RAD32)
    out[:, 6] = np.sin(F32(0.5) * lon_l * DEG2RAD32)
    return out


def target_time_values(times, w_start):
    a = phase32(times, w_start)
    s, c = np.sin(a), np.cos(a)
    return np.stack([s, c, s, c, s], axis=1) + F32(0.5)


def target_rows(ps, data, pts, w_start):
    """§6.1 rows [0, 5 time values, lat, lon, geoinfos, data] -> [P, 8 + G + n]"""
    g = ps["geo"].shape[1]
    rows = np.zeros((len(pts), 8 + g + data.shape[1]), dtype=F32)
    rows[:, 1:6] = target_time_values(ps["times"][pts], w_start)
    rows[:, 6], rows[:, 7] = ps["lat"][pts], ps["lon"][pts]
    rows[:, 8:8 + g] = ps["geo"][pts]
    rows[:, 8 + g:] = data[pts]
    return rows


def target_coords(tab, lat, lon, cells, times, w_start, geo):
    """§6.3 -> [P, 105 + G] float32"""
    n, g = len(lat), geo.shape[1]
    out = np.zeros((n, 105 + g), dtype=F32)
    out[:, 1:6] = target_time_values(times, w_start)
    out[:, 6:6 + g] = geo
    o = 6 + g
    theta = (F32(90.0) - lat.astype(F32)) * DEG2RAD32
    phi = (F32(180.0) + lon.astype(F32)) * DEG2RAD32
    P = s2tor3(theta, phi)
    ex = np.array([1.0, 0.0, 0.0], dtype=F32)
    for k in range(5):
        out[:, o + 15 * k:o + 15 * k + 3] = ex - np.einsum("nij,nj->ni", tab.R[k][cells], P)
        out[:, o + 15 * k + 3:o + 15 * k + 15] = tab.verts_local[cells, k]
    for m in range(8):
        out[:, o + 75 + 3 * m:o + 78 + 3 * m] = ex - np.einsum("nij,nj->ni", tab.R_nbr[m][cells], P)
    return out


# ---------------------------------------------------------- tokenisation (§4)

def hpy_splits(cells, theta, subset, ncell, ts):
    """§4.3 for the points `subset` (reader order): per cell, the list of
    tokens, each an array of point indices."""
    sub_cells = cells[subset]
    o = np.argsort(sub_cells, kind="stable")
    counts = np.bincount(sub_cells, minlength=ncell)
    per_cell = np.split(subset[o], np.cumsum(counts)[:-1])
    out = []
    for idx in per_cell:
        if len(idx) == 0:
            out.append([])
            continue
        idx = idx[np.argsort(theta[idx], kind="stable")]
        out.append([idx[i:i + ts] for i in range(0, len(idx), ts)])
    return out


def tokenize(cells, theta, times, ncell, ts, spacetime):
    """§4.4: per cell, the list of tokens (point index arrays)."""
    n = len(cells)
    if not spacetime:
        return hpy_splits(cells, theta, np.arange(n), ncell, ts)
    result = [[] for _ in range(ncell)]
    for t in np.unique(times):
        subset = np.nonzero(times == t)[0]
        for c, toks in enumerate(hpy_splits(cells, theta, subset, ncell, ts)):
            result[c].extend(toks)
    return result


def flatten(tokens_cells):
    toks = [t for cell in tokens_cells for t in cell]
    lens = np.array([len(cell) for cell in tokens_cells], dtype=np.int32)
    return toks, lens


def padded_index(toks, ts):
    """Upstream's padding trick (§4.3): index i+1 for point i, 0 = zero row."""
    idx = np.zeros((len(toks), ts), dtype=np.int64)
    for j, t in enumerate(toks):
        idx[j, :len(t)] = t + 1
    return idx


def source_rows(tab, ps, data, cells, toks, ts, w_start):
    """§4.2 rows of every token, padded. -> [T, ts, 8 + G + n_src]"""
    n, g = len(ps["lat"]), ps["geo"].shape[1]
    feats = np.zeros((n + 1, 8 + g + data.shape[1]), dtype=F32)
    feats[1:, 1:8] = source_features(tab, ps["lat"], ps["lon"], cells, ps["times"], w_start)
    feats[1:, 8:8 + g] = ps["geo"]
    feats[1:, 8 + g:] = data
    return feats[padded_index(toks, ts)]


# ------------------------------------------------ masking application (§4.6, §5.5)

def apply_source_mask(rows, lens, strategy, all_masked, token_masked, channel_masked, g):
    """Kept tokens, NaN -> 0, per-cell lens and each kept token's cell."""
    token_cell = np.repeat(np.arange(len(lens)), lens)
    if all_masked:
        keep = np.zeros(len(rows), dtype=bool)
    elif strategy == "channel":
        keep = np.ones(len(rows), dtype=bool)
        rows = rows.copy()
        data = rows[:, :, 8 + g:]
        data[np.broadcast_to(channel_masked[:, None, :], data.shape)] = 0.0
    else:
        keep = ~token_masked
    rows = rows[keep]
    rows[np.isnan(rows)] = 0.0
    kept_cells = token_cell[keep]
    return rows, np.bincount(kept_cells, minlength=len(lens)).astype(np.int32), kept_cells


def centroids(tab, token_cells):
    v = tab.ctr32[token_cells]
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    return np.stack([x, y, z, np.arctan2(z, np.sqrt(x * x + y * y)), np.arctan2(y, x)], axis=1).astype(F32)


def mask_target(strategy, all_masked, src_lens, token_masked, tgt_tokens_cells):
    """§5.5: per cell, target token j pairs with source token j.
    -> list of (point index array, source token index or -1) per kept token."""
    src_off = np.concatenate([[0], np.cumsum(src_lens)])
    kept = []
    for c, tgt in enumerate(tgt_tokens_cells):
        if all_masked:
            kept.extend((t, -1) for t in tgt)
            continue
        m = token_masked[src_off[c]:src_off[c + 1]]
        if strategy in ("random", "block"):
            kept.extend((t, -1) for t, mm in zip(tgt, m) if mm)
        elif strategy == "healpix":
            if len(m) > 0 and m[0]:
                kept.extend((t, -1) for t in tgt)
        elif strategy == "causal":
            if len(tgt) == len(m):
                kept.extend((t, -1) for t, mm in zip(tgt, m) if mm)
            elif len(m) == 0:
                kept.extend((t, -1) for t in tgt)
            else:
                nsel = max(1, int(m.sum() / len(m) * len(tgt)))
                kept.extend((t, -1) for t in tgt[-nsel:])
        elif strategy == "channel":
            kept.extend((t, src_off[c] + j if j < len(m) else -1) for j, t in enumerate(tgt))
        else:
            raise ValueError("strategy " + strategy)
    return kept


# ------------------------------------------------------------- targets (§6, §10)

def select_points(kept, cells):
    pts = np.concatenate([t for t, _ in kept]) if kept else np.zeros(0, dtype=np.int64)
    src_tok = np.concatenate([np.full(len(t), s) for t, s in kept]) if kept else np.zeros(0, dtype=np.int64)
    return pts.astype(np.int64), src_tok.astype(np.int64)


def sampling_rate_filter(pts, src_tok, rate, uniforms):
    if uniforms is None:
        return pts, src_tok
    keep = uniforms < rate
    return pts[keep], src_tok[keep]


def max_num_targets_filter(pts, src_tok, cells, ncell, max_num, cell_order):
    """§6.2 step 3 (plus the documented fix when the first cell alone is too big)."""
    if max_num is None or max_num <= 0:
        return pts, src_tok
    counts = np.bincount(cells[pts], minlength=ncell)
    cum = np.cumsum(counts[cell_order])
    nkeep = int(np.searchsorted(cum, max_num, side="right"))
    keep_cells = np.zeros(ncell, dtype=bool)
    keep_cells[cell_order[:nkeep]] = True
    keep = keep_cells[cells[pts]]
    if nkeep == 0 and max_num > 0:
        first = np.nonzero(cells[pts] == cell_order[0])[0][:max_num]
        keep[first] = True
    return pts[keep], src_tok[keep]


def target_arrays(tab, ps, data, cells, pts, src_tok, channel_masked, w_start, prefix, out):
    vals = data[pts].copy()
    if channel_masked is not None and len(pts):
        has = src_tok >= 0
        vis = ~channel_masked[src_tok[has]]
        v = vals[has]
        v[vis] = np.nan
        vals[has] = v
    out[prefix + "tgt_points"] = pts
    out[prefix + "tgt_rows"] = target_rows(ps, data, pts, w_start)
    out[prefix + "tgt_values"] = vals
    out[prefix + "tgt_coords"] = target_coords(tab, ps["lat"][pts], ps["lon"][pts], cells[pts],
                                               ps["times"][pts], w_start, ps["geo"][pts])
    out[prefix + "tgt_raw"] = np.stack([ps["lat"][pts], ps["lon"][pts]], axis=1).astype(F32)
    out[prefix + "tgt_times"] = ps["times"][pts].astype(np.int64)
    out[prefix + "tgt_lens"] = np.bincount(cells[pts], minlength=tab.ncell).astype(np.int32)


def forecast_selection(cells, ncell, rate, keep_uniforms, within_cell_perms):
    """§10: filter, then per cell (reader order) idx_c[perm_c]."""
    idx = np.arange(len(cells))
    if keep_uniforms is not None:
        idx = idx[keep_uniforms < rate]
    o = np.argsort(cells[idx], kind="stable")
    counts = np.bincount(cells[idx], minlength=ncell)
    out, pos = [], 0
    for idx_c in np.split(idx[o], np.cumsum(counts)[:-1]):
        if len(idx_c) == 0:
            continue
        perm = within_cell_perms[pos:pos + len(idx_c)]
        pos += len(idx_c)
        out.append(idx_c[perm])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


# --------------------------------------------------------------- batch (§7)

def layout(src_lens, tgt_lens):
    """src_lens [B, S, C], tgt_lens [B, S, C] (one step). Each sample its own
    cells: sample b's cells become cells b*C .. b*C+C-1 of one B=1 batch,
    then upstream's §7.2-7.4 with B = 1."""
    B, S, C = src_lens.shape
    lens = src_lens.transpose(1, 0, 2).reshape(S, B * C)        # [S, B*C]
    tot = lens.sum(axis=0)
    cell_lens = np.concatenate([[0], tot]).astype(np.int32)
    off = np.concatenate([[0], np.cumsum(tot)[:-1]]).astype(np.int64)
    off_pe = np.zeros(B * C, dtype=np.int64)
    idxs, idxs_pe = [], []
    for s in range(S):
        idxs.append(np.concatenate([np.arange(off[g], off[g] + lens[s, g]) for g in range(B * C)]).astype(np.int64))
        idxs_pe.append(np.concatenate([np.arange(off_pe[g], off_pe[g] + lens[s, g])
                                       for g in range(B * C)]).astype(np.int32))
        off += lens[s]
        off_pe += lens[s]
    tgt = [np.concatenate([[0], tgt_lens[:, s, :].reshape(-1)]).astype(np.int32) for s in range(S)]
    return cell_lens, idxs, idxs_pe, tgt


# --------------------------------------------------------------- driver

def load_pointsets(d, manifest):
    out = {}
    for name, spec in manifest["pointsets"].items():
        ps = {k: np.load(os.path.join(d, spec[k])) for k in ("lat", "lon", "times", "geo")}
        ps["data"] = {k: np.load(os.path.join(d, f)) for k, f in spec["data"].items()}
        out[name] = ps
    return out


def opt(d, case, key):
    f = case.get(key)
    return None if f is None else np.load(os.path.join(d, f))


def run_case(tab, ps, case, d, cache):
    """One case -> dict of output arrays (names without the case prefix)."""
    out = {}
    ts, spacetime, w = case["token_size"], case["spacetime"], case["window_start"]
    key = (case["points"], ts, spacetime)
    if key not in cache:
        cells = cell_of(ps["lat"], ps["lon"], tab.level)
        theta, _ = theta_phi32(ps["lat"], ps["lon"])
        cache[key] = (cells, tokenize(cells, theta, ps["times"], tab.ncell, ts, spacetime))
    cells, tokens_cells = cache[key]
    toks, lens = flatten(tokens_cells)
    out["cells"] = cells
    out["order"] = np.concatenate(toks) if toks else np.zeros(0, dtype=np.int64)
    out["token_start"] = np.concatenate([[0], np.cumsum([len(t) for t in toks])]).astype(np.int64)
    out["cell_tokens"] = lens
    src = ps["data"][case["source"]]
    tgt = ps["data"][case["target"]]
    g = ps["geo"].shape[1]
    rows = source_rows(tab, ps, src, cells, toks, ts, w)
    ncell = tab.ncell
    if case["mode"] == "masking":
        strategy, all_masked = case["strategy"], case["all_masked"]
        token_masked = opt(d, case, "token_masked")
        token_masked = None if token_masked is None else token_masked.astype(bool)
        channel_masked = opt(d, case, "channel_masked")
        channel_masked = None if channel_masked is None else channel_masked.astype(bool)
        kept_rows, src_lens, kept_cells = apply_source_mask(rows, lens, strategy, all_masked, token_masked,
                                                            channel_masked, g)
        # Source and target read the same window: the target tokens are the
        # same partition without padding (§6.1).
        kept = mask_target(strategy, all_masked, lens, token_masked, tokens_cells)
        pts, src_tok = select_points(kept, cells)
        pts, src_tok = sampling_rate_filter(pts, src_tok, case["sampling_rate_target"], opt(d, case, "target_uniforms"))
        pts, src_tok = max_num_targets_filter(pts, src_tok, cells, ncell, case["max_num_targets"],
                                              opt(d, case, "cell_order"))
        use_channel = strategy == "channel" and not all_masked
        target_arrays(tab, ps, tgt, cells, pts, src_tok, channel_masked if use_channel else None, w, "", out)
    else:
        kept_rows, src_lens, kept_cells = apply_source_mask(rows, lens, "random", False,
                                                            np.zeros(len(rows), dtype=bool), None, g)
        pts = forecast_selection(cells, ncell, case["sampling_rate_target"], opt(d, case, "keep_uniforms"),
                                 opt(d, case, "within_cell_perms"))
        pts, _ = max_num_targets_filter(pts, np.full(len(pts), -1), cells, ncell, case["max_num_targets"],
                                        opt(d, case, "cell_order"))
        target_arrays(tab, ps, tgt, cells, pts, np.full(len(pts), -1), None, w, "", out)
    out["src_tokens"] = kept_rows
    out["src_lens"] = src_lens
    out["centroids"] = centroids(tab, kept_cells)
    return out


def cmd_run(d):
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    tab = Tables(manifest["level"])
    pointsets = load_pointsets(d, manifest)
    cache, results = {}, {}
    for case in manifest["cases"]:
        res = run_case(tab, pointsets[case["points"]], case, d, cache)
        results[case["name"]] = res
        for k, v in res.items():
            np.save(os.path.join(d, "%s.%s.npy" % (case["name"], k)), v)
    for lay in manifest.get("layouts", []):
        samples = lay["samples"]                        # [B][S] case names
        src = np.array([[results[c]["src_lens"] for c in row] for row in samples])
        tgt = np.array([[results[c]["tgt_lens"] for c in row] for row in samples])
        cell_lens, idxs, idxs_pe, tgt_idx = layout(src, tgt)
        np.save(os.path.join(d, "%s.source_cell_lens.npy" % lay["name"]), cell_lens)
        for s in range(len(idxs)):
            np.save(os.path.join(d, "%s.idxs_embed.%d.npy" % (lay["name"], s)), idxs[s])
            np.save(os.path.join(d, "%s.idxs_embed_pe.%d.npy" % (lay["name"], s)), idxs_pe[s])
            np.save(os.path.join(d, "%s.target_coords_idx.%d.npy" % (lay["name"], s)), tgt_idx[s])


def cmd_tables(level, d):
    tab = Tables(level)
    os.makedirs(d, exist_ok=True)
    for name in ("V", "R", "verts_local", "nbr_raw", "hp_nbours", "nctrs", "R_nbr", "lonlat"):
        np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(getattr(tab, name)))


def cmd_cells(level, d):
    np.save(os.path.join(d, "cells.npy"),
            cell_of(np.load(os.path.join(d, "lat.npy")), np.load(os.path.join(d, "lon.npy")), level))


def cmd_bench(d, repeats):
    """Times one masking case end to end (tokenise source, mask, tokenise
    targets, mask_target, target arrays), tables built outside the timing."""
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    tab = Tables(manifest["level"])
    pointsets = load_pointsets(d, manifest)
    case = manifest["cases"][0]
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        res = run_case(tab, pointsets[case["points"]], case, d, {})
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "source_tokens": int(len(res["src_tokens"])),
                      "target_points": int(len(res["tgt_points"]))}))


def main(argv):
    if len(argv) >= 3 and argv[1] == "run":
        cmd_run(argv[2])
    elif len(argv) >= 4 and argv[1] == "tables":
        cmd_tables(int(argv[2]), argv[3])
    elif len(argv) >= 4 and argv[1] == "cells":
        cmd_cells(int(argv[2]), argv[3])
    elif len(argv) >= 4 and argv[1] == "bench":
        cmd_bench(argv[2], int(argv[3]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
