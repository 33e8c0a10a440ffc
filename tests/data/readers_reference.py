#!/usr/bin/env python3
"""An independent numpy reading of anemoi and obs stores, written from the
spec (wg-data.md §3.1–3.3, §9, §12.15/16), for the C++ reader tests.

anemoi: channels by §3.1.3 (entries of variables_metadata, computed
forcings, constant_in_time and constant_fields dropped, substring rules,
ascending index); the period's dates (§3.1.2, with an optional frequency);
upstream's TimeWindowHandler and get_dataset_indexes_timestep in numpy
datetime64 arithmetic (§3.2, ε = 1 ms), dates past the window end dropped
(§12.16, reported as "upstream_asserts"); member 0, time-major then grid
order, the coordinate transform of §3.1.4 step 4, NaN coordinates removed,
normalisation in float64 stored float32 (§3.3).

obs: columns (lat, lon, obsvalue channels with excludes applied also when
includes are given, geoinfos between lon and the first obsvalue), rows of a
window = every row with window start ≤ date < window end (the dates alone,
not the hourly index), NaN coordinates removed, data and geoinfos
normalised with the column means and sqrt(vars). Also upstream's row ranges
(§9.2: rows [starts[idx − 1], ends[idx]) with ends = index[…] − 1, kept if
inside the window) and upstream's channel list (excludes ignored when
includes are given), to show what upstream loses.

Writes OUT/manifest.json and per window OUT/w{K}_{lat,lon,times,src,tgt[,geo,rows]}.npy.

Usage: readers_reference.py anemoi STORE OUT --start YYYYMMDDHHMM --end YYYYMMDDHHMM
         --len-hrs H --step-hrs H [--frequency-hrs H] [--source S ...] [--source-exclude S ...]
         [--target S ...] [--target-exclude S ...] --windows K ...
       readers_reference.py obs STORE OUT --base YYYYMMDDHHMM ... (same options)
"""
import argparse
import datetime as dt
import json
import os
import sys

import numpy as np
import zarr


def dt64(yyyymmddhhmm):
    d = dt.datetime.strptime(yyyymmddhhmm, "%Y%m%d%H%M")
    return np.datetime64(d, "us")


def seconds(t):
    return int(np.datetime64(t, "s").astype(np.int64))


def keep(name, include, exclude):
    return (not include or any(s in name for s in include)) and not any(s in name for s in exclude)


def normalise(x, mean, stdev):
    """x: float32 [N, C]; float64 arithmetic, float32 result (§3.3 step 3)."""
    return ((x.astype(np.float64) - np.asarray(mean, np.float64)) / np.asarray(stdev, np.float64)).astype(np.float32)


def windows(a):
    t_start, t_end = dt64(a.start), dt64(a.end)
    length, step = np.timedelta64(a.len_hrs, "h"), np.timedelta64(a.step_hrs, "h")
    n_win = int((t_end - t_start) // step)
    return t_start, t_end, n_win, lambda idx: (t_start + idx * step, t_start + idx * step + length)


def save(out, k, **arrays):
    for name, arr in arrays.items():
        np.save(os.path.join(out, f"w{k}_{name}.npy"), np.ascontiguousarray(arr))


def anemoi(a):
    g = zarr.open_group(a.store, mode="r")
    attrs = g.attrs.asdict()
    if "variables" in attrs:
        name_to_index = {v: i for i, v in enumerate(attrs["variables"])}
    else:
        name_to_index = dict(attrs["name_to_index"])
    meta = attrs.get("variables_metadata")
    typed = list(meta.keys()) if meta is not None else list(name_to_index)
    constant = set(attrs.get("constant_fields", []))

    def select(include, exclude):
        idx = []
        for k in typed:
            m = (meta or {}).get(k, {})
            if m.get("computed_forcing") or m.get("constant_in_time") or k in constant:
                continue
            if keep(k, include, exclude):
                idx.append(name_to_index[k])
        return sorted(idx)

    names = {i: v for v, i in name_to_index.items()}
    src_idx, tgt_idx = select(a.source, a.source_exclude), select(a.target, a.target_exclude)
    mean, stdev = g["mean"][:], g["stdev"][:]

    all_dates = g["dates"][:].astype("datetime64[s]")
    t_start, t_end, n_win, window = windows(a)
    first = int(np.searchsorted(all_dates, t_start.astype("datetime64[s]"), side="left"))
    last = int(np.searchsorted(all_dates, t_end.astype("datetime64[s]"), side="right")) - 1
    k = 1
    if a.frequency_hrs:
        k = int(np.timedelta64(a.frequency_hrs, "h") // (all_dates[1] - all_dates[0]))
    store_idx = np.arange(first, last + 1, k)
    dates = all_dates[store_idx]
    period = dates[1] - dates[0] if dates.size > 1 else all_dates[1] - all_dates[0]
    data_start, data_end = dates[0].astype("datetime64[us]"), dates[-1].astype("datetime64[us]")
    missing = {np.datetime64(d, "s") for d in attrs.get("missing_dates", [])}

    lat64 = g["latitudes" if "latitudes" in g else "latitude"][:]
    lon64 = g["longitudes" if "longitudes" in g else "longitude"][:]
    lat = (2 * np.clip(lat64, -90.0, 90.0) - lat64).astype(np.float32)
    lon = (((lon64 + 180.0) % 360.0) - 180.0).astype(np.float32)

    manifest = {"source": [names[i] for i in src_idx], "target": [names[i] for i in tgt_idx], "n_win": n_win,
                "data_start": seconds(data_start), "data_end": seconds(data_end),
                "period": int(period / np.timedelta64(1, "s")), "windows": {}}
    eps = np.timedelta64(1, "ms")
    for w in a.windows:
        start, end = window(w)
        info = {"start": seconds(start), "end": seconds(end), "upstream_asserts": False}
        if start < data_start or end > data_end:
            d = []
        else:
            d0 = int((start - data_start) // period)
            d1 = int((end - data_start - eps) // period)
            empty = False
            if (start - data_start) % period > np.timedelta64(0, "s"):
                if d0 == d1:
                    empty = True
                d0 += 1
            d1 = d0 + int((end - start - eps) / period)
            d = [] if empty else list(range(d0, d1 + 1))
        inside = [i for i in d if start <= dates[i] < end]
        info["upstream_asserts"] = len(inside) != len(d)
        info["dates"] = [seconds(dates[i]) for i in inside]
        if not inside:
            info["status"] = "empty"
        elif any(dates[i] in missing for i in inside):
            info["status"] = "missing"
        else:
            info["status"] = "ok"
            raw = g["data"].get_orthogonal_selection((store_idx[inside], slice(None), 0, slice(None)))
            T, n_grid = raw.shape[0], raw.shape[2]
            coords_lat, coords_lon = np.tile(lat, T), np.tile(lon, T)
            times = np.repeat(np.array(info["dates"], dtype=np.int64), n_grid)
            ok = ~(np.isnan(coords_lat) | np.isnan(coords_lon))

            def channels(idx, mu, sd):
                x = raw[:, idx, :].astype(np.float32).transpose(0, 2, 1).reshape(T * n_grid, len(idx))
                return normalise(x[ok], mu[idx], sd[idx])

            save(a.out, w, lat=coords_lat[ok], lon=coords_lon[ok], times=times[ok],
                 src=channels(src_idx, mean, stdev), tgt=channels(tgt_idx, mean, stdev))
        manifest["windows"][str(w)] = info
    return manifest


def obs(a):
    g = zarr.open_group(a.store, mode="r")
    data = g["data"]
    cols = list(data.attrs["colnames"])
    means, stdevs = np.array(data.attrs["means"], np.float64), np.sqrt(np.array(data.attrs["vars"], np.float64))
    obs_cols = [i for i, c in enumerate(cols) if "obsvalue" in c]
    lat_c, lon_c = cols.index("lat"), cols.index("lon")
    geo = list(range(lon_c + 1, obs_cols[0]))
    src = [i for i in obs_cols if keep(cols[i], a.source, a.source_exclude)]
    tgt = [i for i in obs_cols if keep(cols[i], a.target, a.target_exclude)]
    # Upstream's precedence: excludes only without an include list.
    up_src = [i for i in obs_cols if (any(s in cols[i] for s in a.source) if a.source
                                      else not any(s in cols[i] for s in a.source_exclude))]
    table = data[:]
    dates = g["dates"][:][:, 0].astype("datetime64[s]")
    base = dt64(a.base)
    index = g[f"idx_{a.base}_1"][:]

    t_start, t_end, n_win, window = windows(a)
    n = index.size
    h_s = int((t_start - base) // np.timedelta64(1, "h"))
    h_e = int((t_end - base) // np.timedelta64(1, "h"))
    starts = index[h_s:min(h_e, n - 1):a.step_hrs]
    ends = index[h_s + a.len_hrs:min(h_e + a.len_hrs, n - 1):a.step_hrs] - 1
    if ends.size < starts.size and ends.size > 0:
        ends = np.append(ends, np.full(starts.size - ends.size, ends[-1]))
    ends = np.clip(ends, 0, index[min(h_e, n - 1)])

    manifest = {"source": [cols[i] for i in src], "target": [cols[i] for i in tgt],
                "geoinfos": [cols[i] for i in geo], "upstream_source": [cols[i] for i in up_src],
                "n_win": n_win, "windows": {}}
    for w in a.windows:
        start, end = window(w)
        rows = np.nonzero((dates >= start.astype("datetime64[s]")) & (dates < end.astype("datetime64[s]")))[0]
        info = {"start": seconds(start), "end": seconds(end), "rows": int(rows.size)}
        if w < min(starts.size, ends.size):
            r0, r1 = int(starts[w - 1]), int(ends[w])
            up = np.arange(r0, max(r0, r1))
            up = up[(dates[up] >= start.astype("datetime64[s]")) & (dates[up] < end.astype("datetime64[s]"))]
            info["upstream_rows"] = int(up.size)
        t = table[rows]
        ok = ~(np.isnan(t[:, lat_c]) | np.isnan(t[:, lon_c]))
        t, r = t[ok], rows[ok]
        save(a.out, w, rows=rows.astype(np.int64), lat=t[:, lat_c].astype(np.float32),
             lon=t[:, lon_c].astype(np.float32), times=dates[r].astype(np.int64),
             geo=normalise(t[:, geo], means[geo], stdevs[geo]), src=normalise(t[:, src], means[src], stdevs[src]),
             tgt=normalise(t[:, tgt], means[tgt], stdevs[tgt]))
        manifest["windows"][str(w)] = info
    return manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["anemoi", "obs"])
    ap.add_argument("store")
    ap.add_argument("out")
    ap.add_argument("--start", required=True)
    ap.add_argument("--end", required=True)
    ap.add_argument("--len-hrs", type=int, required=True)
    ap.add_argument("--step-hrs", type=int, required=True)
    ap.add_argument("--frequency-hrs", type=int, default=0)
    ap.add_argument("--base", default="197001010000")
    for key in ("source", "source-exclude", "target", "target-exclude"):
        ap.add_argument("--" + key, nargs="*", default=[])
    ap.add_argument("--windows", type=int, nargs="*", default=[])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    manifest = anemoi(a) if a.kind == "anemoi" else obs(a)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    sys.exit(main())
