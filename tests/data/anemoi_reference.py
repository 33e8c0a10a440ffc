#!/usr/bin/env python3
"""An independent numpy implementation of the anemoi reading rules, for tests.

Reads a store with Python zarr and applies the rules of the README's "anemoi
streams" section (WeatherGenerator's): channel selection by substring rules,
dropping computed forcings and constant-in-time variables, normalisation by
the store's mean and stdev, NaN sources -> 0, NaN targets invalid, time
windows and missing dates, coordinate normalisation and spatial tokens.
Prints JSON: channels, is_source, the available windows (unshuffled) and,
for each requested window, its values, validity and centroids flattened.

Usage: anemoi_reference.py STORE --token-size N --start YYYYMMDDHHMM
       --end YYYYMMDDHHMM --len-hrs H --step-hrs H [--source S ...]
       [--source-exclude S ...] [--target S ...] [--target-exclude S ...]
       [--windows K ...]
"""
import argparse
import datetime as dt
import json

import numpy as np
import zarr


def seconds(yyyymmddhhmm):
    d = dt.datetime.strptime(yyyymmddhhmm, "%Y%m%d%H%M").replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp())


def iso_seconds(text):
    d = dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--token-size", type=int, required=True)
    ap.add_argument("--start", required=True)
    ap.add_argument("--end", required=True)
    ap.add_argument("--len-hrs", type=int, required=True)
    ap.add_argument("--step-hrs", type=int, required=True)
    for key in ("source", "source-exclude", "target", "target-exclude"):
        ap.add_argument("--" + key, nargs="*", default=[])
    ap.add_argument("--windows", type=int, nargs="*", default=[])
    a = ap.parse_args()

    g = zarr.open_group(a.store, mode="r")
    names = list(g.attrs["variables"])
    meta = g.attrs.get("variables_metadata", {})
    channels, index, is_source, is_target = [], [], [], []
    for i, v in enumerate(names):
        m = meta.get(v, {})
        if m.get("computed_forcing") or m.get("constant_in_time"):
            continue
        src = (not a.source or any(s in v for s in a.source)) and not any(s in v for s in a.source_exclude)
        tgt = (not a.target or any(s in v for s in a.target)) and not any(s in v for s in a.target_exclude)
        if src or tgt:
            channels.append(v)
            index.append(i)
            is_source.append(int(src))
            is_target.append(bool(tgt))
    mean, stdev = g["mean"][:][index], g["stdev"][:][index]

    dates = g["dates"][:].astype("datetime64[s]").astype(np.int64)
    period = int(dates[1] - dates[0])
    missing = {iso_seconds(d) for d in g.attrs.get("missing_dates", [])}
    start, end = seconds(a.start), seconds(a.end)
    step, length = a.step_hrs * 3600, a.len_hrs * 3600
    per_window = length // period

    def times(k):
        t0 = start + k * step
        return [t0 + j * period for j in range(per_window)]

    def available(k):
        return all(dates[0] <= t <= dates[-1] and t not in missing for t in times(k))

    count = (end - start) // step + 1
    windows = [k for k in range(count) if available(k)]

    lat, lon = g["latitudes"][:], g["longitudes"][:]
    keep = np.flatnonzero(np.isfinite(lat) & np.isfinite(lon))
    la, lo = lat[keep].astype(np.float64), lon[keep].astype(np.float64)
    y = np.mod(la + 90.0, 360.0)
    flip = y > 180.0
    y[flip] = 360.0 - y[flip]
    lo = lo + np.where(flip, 180.0, 0.0)
    la = y - 90.0
    lo = np.mod(lo + 180.0, 360.0) - 180.0
    ts = a.token_size
    ntok = -(-keep.size // ts)
    geo = []
    for t in range(ntok):
        sl = slice(t * ts, min(keep.size, (t + 1) * ts))
        sx, cx = np.sin(np.deg2rad(lo[sl])).sum(), np.cos(np.deg2rad(lo[sl])).sum()
        r = np.hypot(sx, cx)
        geo.append((la[sl].mean() / 90.0, sx / r if r > 0 else 0.0, cx / r if r > 0 else 1.0))

    out = {"channels": channels, "is_source": is_source, "windows": windows,
           "tokens": per_window * ntok, "samples": {}}
    data = g["data"]
    for k in a.windows:
        vals = np.zeros((per_window, ntok * ts, len(channels)), np.float32)
        ok = np.zeros_like(vals, dtype=np.uint8)
        cen = []
        for j, t in enumerate(times(k)):
            idx = (t - int(dates[0])) // period
            raw = data[idx, :, 0, :][index][:, keep].astype(np.float64)  # [C, cells]
            norm = ((raw - mean[:, None]) / stdev[:, None]).T               # [cells, C]
            finite = np.isfinite(norm)
            vals[j, :keep.size] = np.where(finite, norm, 0.0).astype(np.float32)
            ok[j, :keep.size] = finite & np.array(is_target)[None, :]
            tod = 2 * np.pi * (t % 86400) / 86400.0
            for gl in geo:
                cen.extend([gl[0], gl[1], gl[2], np.sin(tod), np.cos(tod)])
        out["samples"][str(k)] = {"values": vals.ravel().tolist(), "valid": ok.ravel().tolist(),
                                  "centroids": [float(c) for c in cen]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
