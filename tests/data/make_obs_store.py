#!/usr/bin/env python3
"""Writes a WeatherGenerator `type: obs` Zarr v2 store (wg-data.md §9) with
Python zarr (python3-zarr 2.13), for the obs reader tests.

Layout:
- `data` (n_rows, n_cols) float32 table, rows sorted by time, chunked by
  --chunk-rows rows (blosc lz4); attributes `colnames`, `means`, `vars`
  (per column, NaN-aware) and `obs_id`.
- `dates` (n_rows, 1) datetime64[s].
- `idx_{YYYYMMDDHHMM}_1` (YYYYMMDDHHMM = --base): int64, entry h = the first
  row whose date is ≥ base + h hours (numpy searchsorted, side "left"),
  h = 0 … one hour past the last observation (minus --index-short hours).

Kinds:
- synop: surface stations at fixed places reporting at every full hour
  (rows exactly on the hour boundaries) and some at half past; columns lat,
  lon, obsvalue_{t2m,ps,rh2m,u10m,v10m}_0, then sin/cos_julian_day (not
  channels): no geoinfo column (G = 0). Some values NaN, some stations with
  a NaN latitude or longitude.
- atms: NPP-ATMS-like satellite passes (a burst of scan positions every
  ~101 min, times to the second); columns healpix_idx, lat, lon, four zenith
  / azimuth angles (geoinfos, G = 4), obsvalue_rawbt_1 … _22. Some
  brightness temperatures NaN.

--gap H0 H1 (hours after --start, repeatable) leaves [H0, H1) without
observations, so windows there are empty. --no-latlon renames the lat/lon
columns; --no-index writes no idx_* array.

Usage: make_obs_store.py OUT.zarr --kind synop|atms [--start ISO]
       [--hours N] [--base ISO] [--gap H0 H1 ...] [--chunk-rows N]
       [--index-short H] [--no-latlon] [--no-index] [--seed S]
"""
import argparse
import datetime as dt
import json
import os
import shutil
import sys

import numpy as np
import zarr
from numcodecs import Blosc


def synop(rng, t0, hours):
    n_st = 120
    st_lat = rng.uniform(-70, 75, n_st)
    st_lon = rng.uniform(-180, 180, n_st)
    st_lat[5] = np.nan
    st_lon[17] = np.nan
    times, rows = [], []
    for h in range(hours):
        for s in range(n_st):
            for minute in ((0, 30) if s % 7 == 0 else (0,)):
                if s % 11 == 3 and h % 5 == 2:  # a station that does not always report
                    continue
                times.append(t0 + h * 3600 + minute * 60)
                rows.append(s)
    times = np.array(times, dtype=np.int64)
    rows = np.array(rows)
    la, lo = st_lat[rows], st_lon[rows]
    day = (times % (365 * 86400)) / 86400.0
    hour = (times % 86400) / 3600.0
    t2m = 288 - 30 * np.abs(np.nan_to_num(la)) / 90 + 5 * np.sin(2 * np.pi * hour / 24) + rng.normal(0, 1, la.size)
    ps = 101325 - 12 * np.abs(np.nan_to_num(lo)) + rng.normal(0, 300, la.size)
    rh = np.clip(70 + 20 * np.sin(np.deg2rad(np.nan_to_num(lo))) + rng.normal(0, 5, la.size), 0, 100)
    u = rng.normal(2, 4, la.size)
    v = rng.normal(-1, 4, la.size)
    rh[rng.random(la.size) < 0.2] = np.nan   # humidity often missing
    ps[rng.random(la.size) < 0.05] = np.nan
    cols = ["lat", "lon", "obsvalue_t2m_0", "obsvalue_ps_0", "obsvalue_rh2m_0", "obsvalue_u10m_0",
            "obsvalue_v10m_0", "sin_julian_day", "cos_julian_day"]
    table = np.stack([la, lo, t2m, ps, rh, u, v, np.sin(2 * np.pi * day / 365), np.cos(2 * np.pi * day / 365)],
                     axis=1)
    return cols, times, table


def atms(rng, t0, hours):
    period, per_pass, dur = 101 * 60, 480, 8 * 60
    times, lat, lon, scan = [], [], [], []
    start = t0 + 17 * 60
    k = 0
    while start < t0 + hours * 3600:
        offs = np.sort(rng.integers(0, dur, per_pass))
        track_lon0 = (k * 25.3) % 360 - 180
        la = np.linspace(-80, 80, per_pass) * (1 if k % 2 == 0 else -1)
        sc = rng.integers(1, 97, per_pass)
        lo = ((track_lon0 + (sc - 48) * 0.5 + 180) % 360) - 180
        times.append(start + offs)
        lat.append(la)
        lon.append(lo)
        scan.append(sc)
        start += period
        k += 1
    times = np.concatenate(times).astype(np.int64)
    lat, lon, scan = np.concatenate(lat), np.concatenate(lon), np.concatenate(scan)
    order = np.argsort(times, kind="stable")
    times, lat, lon, scan = times[order], lat[order], lon[order], scan[order]
    lat[3] = np.nan
    n = times.size
    sat_zen = np.abs(scan - 48.5) * 1.1 + rng.normal(0, 0.1, n)
    sol_zen = rng.uniform(0, 180, n)
    sat_az = rng.uniform(-180, 180, n)
    sol_az = rng.uniform(-180, 180, n)
    bts = []
    for c in range(22):
        bt = 200 + 3 * c + 30 * np.cos(np.deg2rad(lat)) + rng.normal(0, 2, n)
        bt[rng.random(n) < 0.02 * (1 + c % 3)] = np.nan
        bts.append(bt)
    cols = ["healpix_idx", "lat", "lon", "satellite_zenith_angle", "solar_zenith_angle", "satellite_azimuth_angle",
            "solar_azimuth_angle"] + [f"obsvalue_rawbt_{c + 1}" for c in range(22)]
    table = np.stack([rng.integers(0, 3072, n).astype(np.float64), lat, lon, sat_zen, sol_zen, sat_az, sol_az] + bts,
                     axis=1)
    return cols, times, table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--kind", choices=["synop", "atms"], required=True)
    ap.add_argument("--start", default="2020-01-01T00:00:00")
    ap.add_argument("--hours", type=int, default=96)
    ap.add_argument("--base", default="1970-01-01T00:00:00")
    ap.add_argument("--gap", type=int, nargs=2, action="append", default=[])
    ap.add_argument("--chunk-rows", type=int, default=700)
    ap.add_argument("--index-short", type=int, default=0, help="end the hourly index this many hours early")
    ap.add_argument("--no-latlon", action="store_true")
    ap.add_argument("--no-index", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    epoch = lambda iso: int(dt.datetime.fromisoformat(iso).replace(tzinfo=dt.timezone.utc).timestamp())
    t0, base = epoch(a.start), epoch(a.base)
    cols, times, table = (synop if a.kind == "synop" else atms)(rng, t0, a.hours)
    keep = np.ones(times.size, dtype=bool)
    for h0, h1 in a.gap:
        keep &= ~((times >= t0 + h0 * 3600) & (times < t0 + h1 * 3600))
    times, table = times[keep], table[keep].astype(np.float32)
    if a.no_latlon:
        cols = [{"lat": "latitude", "lon": "longitude"}.get(c, c) for c in cols]

    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    root = zarr.open_group(a.out, mode="w")
    data = root.create_dataset("data", data=table, chunks=(a.chunk_rows, table.shape[1]), dtype="<f4",
                               compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
    t64 = table.astype(np.float64)
    data.attrs["colnames"] = cols
    data.attrs["means"] = [float(x) for x in np.nanmean(t64, axis=0)]
    data.attrs["vars"] = [float(x) for x in np.nanvar(t64, axis=0)]
    data.attrs["obs_id"] = 1 if a.kind == "synop" else 2
    root.create_dataset("dates", data=times.astype("datetime64[s]").reshape(-1, 1), chunks=(a.chunk_rows, 1),
                        dtype="<M8[s]", compressor=Blosc(cname="zstd", clevel=3))
    index_name = None
    if not a.no_index:
        last_hour = (int(times.max()) - base) // 3600 + 1 - a.index_short
        hours = base + 3600 * np.arange(last_hour + 1, dtype=np.int64)
        index = np.searchsorted(times, hours, side="left").astype(np.int64)
        stamp = dt.datetime.fromtimestamp(base, dt.timezone.utc).strftime("%Y%m%d%H%M")
        index_name = f"idx_{stamp}_1"
        root.create_dataset(index_name, data=index, chunks=(65536,), dtype="<i8",
                            compressor=Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE))
    root.attrs["description"] = f"WeatherGenerator obs fixture ({a.kind})"
    print(json.dumps({"store": a.out, "rows": int(times.size), "columns": cols, "index": index_name}))


if __name__ == "__main__":
    sys.exit(main())
