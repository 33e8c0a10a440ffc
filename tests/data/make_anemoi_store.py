#!/usr/bin/env python3
"""Writes a small anemoi-datasets-layout Zarr v2 store with Python zarr.

The layout follows anemoi-datasets: a root group whose attributes name the
variables, frequency, dates and missing dates; `data` [dates, variables, 1,
cells] with one date per chunk; `dates`, `latitudes`, `longitudes`; and the
per-variable statistics (`mean`, `stdev`, `minimum`, `maximum`, `sums`,
`squares`, `count`, `has_nans`).

What the fixture exercises on purpose:
- variables the stream rules hit: `tp` (a source_exclude in the test
  streams), `q_850` (a target_exclude), `cos_latitude` and `insolation`
  (computed forcings) and `lsm` (constant in time), which the reader drops;
- `sst` is NaN over "land" cells at every date (source NaN -> 0, target
  masked);
- one missing date (listed in `missing_dates`, its chunk file not written:
  the reader must see fill values);
- a cell with NaN latitude and one with NaN longitude (dropped), a latitude
  above 90 (reflected) and longitudes in [0, 360) (wrapped);
- codecs: `data` blosc lz4 with byte shuffle (anemoi's default), `dates`
  blosc zstd, `latitudes` uncompressed, `longitudes` blosc with bit shuffle.

Fields are smooth travelling waves plus a little noise, so a model can
learn to fill in masked tokens. Deterministic for a given --seed.

Usage: make_anemoi_store.py OUT.zarr [--dates N] [--lat N] [--lon N]
       [--extra-variables N] [--missing I ...] [--corrupt-chunk I]
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

BASE_VARIABLES = ["10u", "10v", "2t", "msl", "sst", "tp", "z_500", "t_850", "q_850",
                  "cos_latitude", "insolation", "lsm"]
COMPUTED = {"cos_latitude", "insolation"}
CONSTANT = {"cos_latitude", "lsm"}


def grid(n_lat, n_lon):
    lat = -90 + (np.arange(n_lat) + 0.5) * 180.0 / n_lat
    lon = (np.arange(n_lon) + 0.5) * 360.0 / n_lon          # [0, 360), as anemoi stores them
    lats, lons = np.meshgrid(lat, lon, indexing="ij")
    lats, lons = lats.ravel().astype(np.float64), lons.ravel().astype(np.float64)
    if lats.size > 12:
        lats[5] = np.nan          # dropped by the reader
        lons[9] = np.nan          # dropped by the reader
        lats[11], lons[11] = 95.0, 10.0  # reflected: 85 N, 190 E -> -170
    return lats, lons


def fields(times_h, lats, lons, variables, rng):
    """[dates, variables, cells] float64 values."""
    la, lo = np.deg2rad(np.nan_to_num(lats)), np.deg2rad(np.nan_to_num(lons))
    days = times_h[:, None] / 24.0
    land = (np.sin(3 * lo) * np.cos(2 * la)) > 0.3
    out = np.empty((times_h.size, len(variables), lats.size))
    for i, name in enumerate(variables):
        r = np.random.default_rng(1000 + i)
        k, l, w, ph = 1 + r.integers(0, 3), 1 + r.integers(0, 2), 0.2 + 0.6 * r.random(), 2 * np.pi * r.random()
        base, amp = 100.0 * r.standard_normal(), np.exp(r.standard_normal())
        wave = np.sin(k * lo[None, :] + l * la[None, :] - 2 * np.pi * w * days + ph)
        v = base + amp * (wave * np.cos(la)[None, :] + 0.3 * np.cos(2 * la)[None, :])
        v += amp * 0.05 * rng.standard_normal(v.shape)
        if name == "2t":  # a daily cycle: time of day matters
            v += amp * 0.3 * np.sin(2 * np.pi * (days + lo[None, :] / (2 * np.pi)))
        if name == "sst":
            v[:, land] = np.nan
        if name in CONSTANT:
            v = np.repeat(v[:1], times_h.size, axis=0)
        if name == "cos_latitude":
            v = np.repeat(np.cos(la)[None, :], times_h.size, axis=0)
        out[:, i, :] = v
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--dates", type=int, default=120)
    ap.add_argument("--lat", type=int, default=8)
    ap.add_argument("--lon", type=int, default=16)
    ap.add_argument("--frequency", type=int, default=6, help="hours between dates")
    ap.add_argument("--start", default="2020-01-01T00:00:00")
    ap.add_argument("--extra-variables", type=int, default=0, help="more plain variables (benchmark sizes)")
    ap.add_argument("--missing", type=int, nargs="*", default=[13], help="indices of missing dates")
    ap.add_argument("--corrupt-chunk", type=int, nargs="*", default=[],
                    help="date indices whose data chunk is truncated to half its size")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    variables = BASE_VARIABLES + [f"extra_{i}" for i in range(a.extra_variables)]
    start = dt.datetime.fromisoformat(a.start)
    times_h = np.arange(a.dates, dtype=np.float64) * a.frequency
    dates = np.array([start + dt.timedelta(hours=float(h)) for h in times_h], dtype="datetime64[s]")
    lats, lons = grid(a.lat, a.lon)
    rng = np.random.default_rng(a.seed)
    values = fields(times_h, lats, lons, variables, rng).astype(np.float32)
    missing = sorted(set(i for i in a.missing if 0 <= i < a.dates))
    values[missing] = np.nan

    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    root = zarr.open_group(a.out, mode="w")
    nvar, ncell = len(variables), lats.size
    data = root.create_dataset("data", shape=(a.dates, nvar, 1, ncell), chunks=(1, nvar, 1, ncell), dtype="<f4",
                               compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE), fill_value=np.nan)
    for t in range(a.dates):
        if t not in missing:
            data[t, :, 0, :] = values[t]
    root.create_dataset("dates", data=dates, dtype="<M8[s]", compressor=Blosc(cname="zstd", clevel=3))
    root.create_dataset("latitudes", data=lats, dtype="<f8", compressor=None)
    root.create_dataset("longitudes", data=lons, dtype="<f8",
                        compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.BITSHUFFLE))

    ok = np.array([t not in missing for t in range(a.dates)])
    v64 = values[ok].astype(np.float64)  # [dates, vars, cells]
    with np.errstate(invalid="ignore"):
        count = np.sum(~np.isnan(v64), axis=(0, 2)).astype(np.int64)
        sums = np.nansum(v64, axis=(0, 2))
        squares = np.nansum(v64 * v64, axis=(0, 2))
        mean = sums / count
        stdev = np.sqrt(np.maximum(squares / count - mean * mean, 0))
    stats = {"mean": mean, "stdev": stdev, "minimum": np.nanmin(v64, axis=(0, 2)),
             "maximum": np.nanmax(v64, axis=(0, 2)), "sums": sums, "squares": squares}
    for name, arr in stats.items():
        root.create_dataset(name, data=arr, dtype="<f8")
    root.create_dataset("count", data=count, dtype="<i8")
    build = root.create_group("_build")  # anemoi keeps build bookkeeping in a subgroup
    build.create_dataset("lengths", data=np.ones(a.dates, dtype=np.int64), dtype="<i8")
    root.create_dataset("has_nans", data=np.isnan(v64).any(axis=(0, 2)), dtype="|b1")

    iso = lambda d: str(np.datetime_as_string(d, unit="s"))
    meta = {}
    for name in variables:
        m = {"mars": {"param": name}}
        if name in COMPUTED:
            m = {"computed_forcing": True, "constant_in_time": name in CONSTANT}
        elif name in CONSTANT:
            m["constant_in_time"] = True
        meta[name] = m
    root.attrs.update({
        "variables": variables,
        "frequency": f"{a.frequency}h",
        "start_date": iso(dates[0]),
        "end_date": iso(dates[-1]),
        "missing_dates": [iso(dates[i]) for i in missing],
        "resolution": "test",
        "field_shape": [a.lat, a.lon],
        "variables_metadata": meta,
        "constant_fields": sorted(CONSTANT),
        "ensemble_dimension": 1,
    })
    for t in a.corrupt_chunk:
        path = os.path.join(a.out, "data", f"{t}.0.0.0")
        size = os.path.getsize(path)
        with open(path, "r+b") as f:  # a torn write: the blosc header promises more than is there
            f.truncate(size // 2)
    print(json.dumps({"store": a.out, "dates": a.dates, "variables": nvar, "cells": int(ncell),
                      "missing": missing, "bytes": int(values.nbytes)}))


if __name__ == "__main__":
    sys.exit(main())
