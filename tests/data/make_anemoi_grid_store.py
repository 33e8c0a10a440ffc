#!/usr/bin/env python3
"""Writes an anemoi-datasets-layout Zarr v2 store on an octahedral reduced
Gaussian grid (O-N: 2N latitude rings, ring i from a pole with 4i + 16
points; O96 = 40,320 cells, ERA5's grid), date by date so that an
ERA5-o96-sized store fits in little memory. Python zarr (python3-zarr 2.13).

Layout as anemoi-datasets and tests/data/make_anemoi_store.py: root
attributes (variables or name_to_index, frequency, start/end dates,
missing_dates, variables_metadata, constant_fields), `data` [dates,
variables, ensembles, cells] float32 with one date per chunk (blosc lz4,
byte shuffle, fill NaN), `dates` <M8[s], `latitudes`/`longitudes` <f8 (or
the singular names), statistics `mean`, `stdev`, `minimum`, `maximum`,
`sums`, `squares`, `count`, `has_nans`, and a `_build` group.

Variables (ERA5 v8 o96 by default, 101): surface 10u 10v 2d 2t cp msl skt sp
tcw tp; q t u v w z on --levels; computed forcings (cos/sin_julian_day,
cos/sin_latitude, cos/sin_local_time, cos/sin_longitude, insolation);
constants lsm sdor slor z. Options add what the reader tests exercise:
--sst (NaN over "land" at every date), --edge-coords (NaN lat, NaN lon,
latitudes beyond ±90, longitudes 359.99999999999994, 540, -180, -0.0),
--unlisted VAR (left out of variables_metadata: never selectable),
--constant-only VAR (only in constant_fields), --name-to-index (no
`variables`), --singular-coords (latitude/longitude), --ensembles N
(member k = member 0 + k), missing and corrupt dates.

Fields: smooth travelling waves plus a little noise, deterministic for --seed.

Usage: make_anemoi_grid_store.py OUT.zarr [--grid N] [--dates N]
       [--frequency H] [--start ISO] [--levels L ...] [--missing I ...]
       [--corrupt-chunk I ...] [--sst] [--edge-coords] [--unlisted V ...]
       [--constant-only V ...] [--name-to-index] [--singular-coords]
       [--ensembles N] [--seed S]
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

SURFACE = ["10u", "10v", "2d", "2t", "cp", "msl", "skt", "sp", "tcw", "tp"]
LEVEL_PARAMS = ["q", "t", "u", "v", "w", "z"]
ERA5_LEVELS = [50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000]
FORCINGS = ["cos_julian_day", "cos_latitude", "cos_local_time", "cos_longitude", "insolation",
            "sin_julian_day", "sin_latitude", "sin_local_time", "sin_longitude"]
CONSTANTS = ["lsm", "sdor", "slor", "z"]


def o_grid(n):
    """Latitudes (north → south) and longitudes in [0, 360) of the O-n grid."""
    x, _ = np.polynomial.legendre.leggauss(2 * n)
    ring_lat = np.rad2deg(np.arcsin(x))[::-1]  # north first
    lats, lons = [], []
    for r in range(2 * n):
        i = r + 1 if r < n else 2 * n - r
        m = 4 * i + 16
        lats.append(np.full(m, ring_lat[r]))
        lons.append(np.arange(m) * 360.0 / m)
    return np.concatenate(lats), np.concatenate(lons)


def edge_coords(lats, lons):
    lats, lons = lats.copy(), lons.copy()
    lats[3] = np.nan                      # dropped
    lons[7] = np.nan                      # dropped
    lats[11] = 95.0                       # 2·clip − lat → 85
    lats[12] = -93.5                      # → -86.5
    lons[13] = 359.99999999999994         # (lon + 180) mod 360 − 180 just below 180
    lons[14] = 540.0                      # → -180
    lons[15] = -180.0                     # → -180
    lons[16] = -0.0
    lons[17] = 179.99999999999997
    return lats, lons


def variable_names(levels, sst):
    names = list(SURFACE) + (["sst"] if sst else [])
    for p in LEVEL_PARAMS:
        names += [f"{p}_{lev}" for lev in levels]
    return names + FORCINGS + CONSTANTS


def field(name, t_hours, la, lo, land, rng):
    """float64 [cells] value of `name` at hour t_hours."""
    r = np.random.default_rng(abs(hash_name(name)) % (2**32))
    k, l, w, ph = 1 + r.integers(0, 3), 1 + r.integers(0, 2), 0.2 + 0.6 * r.random(), 2 * np.pi * r.random()
    base, amp = 100.0 * r.standard_normal(), np.exp(r.standard_normal())
    days = t_hours / 24.0
    if name in CONSTANTS:
        days = 0.0
    v = base + amp * (np.sin(k * lo + l * la - 2 * np.pi * w * days + ph) * np.cos(la) + 0.3 * np.cos(2 * la))
    if name not in CONSTANTS and name not in FORCINGS:
        v = v + amp * 0.05 * rng.standard_normal(la.size)
    if name == "sst":
        v[land] = np.nan
    if name == "cos_latitude":
        v = np.cos(la)
    return v


def hash_name(name):
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) % (2**64)
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--grid", type=int, default=8, help="N of the O-N grid (96: 40,320 cells)")
    ap.add_argument("--dates", type=int, default=40)
    ap.add_argument("--frequency", type=int, default=6, help="hours between dates")
    ap.add_argument("--start", default="2020-01-01T00:00:00")
    ap.add_argument("--levels", type=int, nargs="*", default=ERA5_LEVELS)
    ap.add_argument("--missing", type=int, nargs="*", default=[])
    ap.add_argument("--corrupt-chunk", type=int, nargs="*", default=[])
    ap.add_argument("--sst", action="store_true")
    ap.add_argument("--edge-coords", action="store_true")
    ap.add_argument("--unlisted", nargs="*", default=[])
    ap.add_argument("--constant-only", nargs="*", default=[])
    ap.add_argument("--name-to-index", action="store_true")
    ap.add_argument("--singular-coords", action="store_true")
    ap.add_argument("--ensembles", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    variables = variable_names(a.levels, a.sst)
    nvar = len(variables)
    lats, lons = o_grid(a.grid)
    if a.edge_coords:
        lats, lons = edge_coords(lats, lons)
    ncell = lats.size
    la, lo = np.deg2rad(np.nan_to_num(lats)), np.deg2rad(np.nan_to_num(lons))
    land = (np.sin(3 * lo) * np.cos(2 * la)) > 0.3
    start = dt.datetime.fromisoformat(a.start)
    dates = np.array([start + dt.timedelta(hours=a.frequency * i) for i in range(a.dates)], dtype="datetime64[s]")
    missing = sorted(set(i for i in a.missing if 0 <= i < a.dates))
    rng = np.random.default_rng(a.seed)

    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    root = zarr.open_group(a.out, mode="w")
    data = root.create_dataset("data", shape=(a.dates, nvar, a.ensembles, ncell),
                               chunks=(1, nvar, a.ensembles, ncell), dtype="<f4",
                               compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE), fill_value=np.nan)
    sums = np.zeros(nvar)
    squares = np.zeros(nvar)
    count = np.zeros(nvar, dtype=np.int64)
    vmin = np.full(nvar, np.inf)
    vmax = np.full(nvar, -np.inf)
    has_nans = np.zeros(nvar, dtype=bool)
    for t in range(a.dates):
        if t in missing:
            continue
        vals = np.stack([field(v, t * a.frequency, la, lo, land, rng) for v in variables]).astype(np.float32)
        block = np.stack([vals + np.float32(k) for k in range(a.ensembles)], axis=1)  # [vars, ens, cells]
        data[t] = block
        v64 = vals.astype(np.float64)
        ok = ~np.isnan(v64)
        sums += np.where(ok, v64, 0).sum(axis=1)
        squares += np.where(ok, v64 * v64, 0).sum(axis=1)
        count += ok.sum(axis=1)
        vmin = np.minimum(vmin, np.nanmin(v64, axis=1))
        vmax = np.maximum(vmax, np.nanmax(v64, axis=1))
        has_nans |= ~ok.all(axis=1)
    mean = sums / count
    stdev = np.sqrt(np.maximum(squares / count - mean * mean, 0))
    for name, arr in {"mean": mean, "stdev": stdev, "minimum": vmin, "maximum": vmax, "sums": sums,
                      "squares": squares}.items():
        root.create_dataset(name, data=arr, dtype="<f8")
    root.create_dataset("count", data=count, dtype="<i8")
    root.create_dataset("has_nans", data=has_nans, dtype="|b1")
    root.create_dataset("dates", data=dates, dtype="<M8[s]", compressor=Blosc(cname="zstd", clevel=3))
    lat_key, lon_key = ("latitude", "longitude") if a.singular_coords else ("latitudes", "longitudes")
    root.create_dataset(lat_key, data=lats, dtype="<f8")
    root.create_dataset(lon_key, data=lons, dtype="<f8")
    build = root.create_group("_build")
    build.create_dataset("lengths", data=np.ones(a.dates, dtype=np.int64), dtype="<i8")

    iso = lambda d: str(np.datetime_as_string(d, unit="s"))
    meta = {}
    for name in variables:
        if name in a.unlisted:
            continue
        m = {"mars": {"param": name}}
        if name in FORCINGS:
            m = {"computed_forcing": True, "constant_in_time": name in ("cos_latitude", "sin_latitude",
                                                                         "cos_longitude", "sin_longitude")}
        elif name in CONSTANTS and name not in a.constant_only:
            m["constant_in_time"] = True
        meta[name] = m
    attrs = {
        "frequency": f"{a.frequency}h",
        "start_date": iso(dates[0]),
        "end_date": iso(dates[-1]),
        "missing_dates": [iso(dates[i]) for i in missing],
        "resolution": f"o{a.grid}",
        "field_shape": [ncell],
        "variables_metadata": meta,
        "constant_fields": sorted(set(CONSTANTS) | set(a.constant_only)),
        "ensemble_dimension": a.ensembles,
    }
    if a.name_to_index:
        attrs["name_to_index"] = {v: i for i, v in enumerate(variables)}
    else:
        attrs["variables"] = variables
    root.attrs.update(attrs)
    for t in a.corrupt_chunk:
        path = os.path.join(a.out, "data", f"{t}.0.0.0")
        size = os.path.getsize(path)
        with open(path, "r+b") as f:  # a torn write: the blosc header promises more than is there
            f.truncate(size // 2)
    print(json.dumps({"store": a.out, "dates": a.dates, "variables": nvar, "cells": int(ncell),
                      "missing": missing}))


if __name__ == "__main__":
    sys.exit(main())
