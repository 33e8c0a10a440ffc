#!/usr/bin/python3
"""Writes the Zarr v2 fixture stores for tests/io/test_zarr.cpp with Python zarr.

Usage: make_zarr_zoo.py OUTDIR

OUTDIR/zoo.zarr          a group with one array per case below
OUTDIR/expected/<name>.bin  the raw little-endian C-order bytes of z[...]
                            as Python zarr returns it
OUTDIR/expected/index.json  name -> {"dtype", "shape", "chunks", "fill_value"}
OUTDIR/bad.zarr          arrays the C++ reader must reject (unsupported
                         dtype, compressor, filters, order), written by zarr too
"""
import json
import os
import sys

try:
    import numcodecs
    import numpy as np
    import zarr
except ImportError as e:
    sys.exit(f"make_zarr_zoo.py: {e}: install python3-zarr and python3-numcodecs (run scripts/setup.sh)")

Blosc = numcodecs.Blosc
RNG = np.random.default_rng(20240611)


def floats(shape, dtype, nan_fraction=0.0):
    """Smooth-ish values (they compress) with some NaNs."""
    n = int(np.prod(shape))
    x = (np.sin(np.arange(n) * 0.05) * 100 + RNG.normal(0, 1, n)).astype(dtype)
    if nan_fraction:
        x[RNG.random(n) < nan_fraction] = np.nan
    return x.reshape(shape)


def ints(shape):
    return RNG.integers(-(2**62), 2**62, size=shape, dtype=np.int64)


def make(root, name, data, chunks, **kw):
    z = root.create_dataset(name, shape=data.shape, chunks=chunks, dtype=data.dtype, **kw)
    z[...] = data
    return z


def write_cases(root):
    """Creates every array of the zoo; returns {name: zarr array}."""
    a = {}
    a["f4_lz4_2d"] = make(root, "f4_lz4_2d", floats((37, 23), "<f4", 0.1), (10, 7), fill_value=np.nan)
    a["f8_zstd_1d"] = make(root, "f8_zstd_1d", floats((101,), "<f8"), (16,),
                           compressor=Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE), fill_value=-1.5)
    a["i8_bitshuffle_2d"] = make(root, "i8_bitshuffle_2d", ints((13, 9)), (4, 4),
                                 compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.BITSHUFFLE), fill_value=42)
    a["b1_noshuffle_1d"] = make(root, "b1_noshuffle_1d", RNG.random(50) < 0.3, (8,),
                                compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.NOSHUFFLE), fill_value=True)
    dates = np.datetime64("1979-01-01T00:00:00", "s") + np.arange(30) * np.timedelta64(6, "h")
    a["m8s_dates"] = make(root, "m8s_dates", dates, (7,))
    a["f4_raw_4d"] = make(root, "f4_raw_4d", floats((5, 3, 2, 7), "<f4", 0.05), (2, 2, 1, 4), compressor=None,
                          fill_value=0.0)
    a["i8_raw_1d"] = make(root, "i8_raw_1d", ints((19,)), (5,), compressor=None, fill_value=None)
    a["f8_slash_2d"] = make(root, "f8_slash_2d", floats((9, 11), "<f8"), (4, 5), dimension_separator="/",
                            fill_value=np.inf)
    a["f8_blosclz_clevel0"] = make(root, "f8_blosclz_clevel0", floats((40,), "<f8"), (12,),
                                   compressor=Blosc(cname="blosclz", clevel=0), fill_value=-np.inf)
    a["f4_zstd_bitshuffle_4d"] = make(root, "f4_zstd_bitshuffle_4d", floats((3, 4, 5, 6), "<f4", 0.02), (2, 3, 2, 4),
                                      compressor=Blosc(cname="zstd", clevel=5, shuffle=Blosc.BITSHUFFLE))
    a["f4_fill_null"] = make(root, "f4_fill_null", floats((10, 10), "<f4"), (4, 4), fill_value=None)
    a["f4_big_chunks"] = make(root, "f4_big_chunks", floats((3, 300000), "<f4", 0.001), (1, 300000),
                              fill_value=np.nan)
    a["f8_scalar"] = make(root, "f8_scalar", np.array(2.5, dtype="<f8"), ())
    a["m8s_nat_fill"] = make(root, "m8s_nat_fill", dates[:10], (4,), fill_value=np.datetime64("NaT"))
    del_chunk = make(root, "f8_deleted_chunk", floats((12, 6), "<f8"), (5, 3), fill_value=3.25)
    os.remove(os.path.join(root.store.path, "f8_deleted_chunk", "1.1"))
    a["f8_deleted_chunk"] = del_chunk
    a["f4_unwritten_chunk"] = unwritten_chunk_case(root)
    a["data"] = anemoi_like(root)
    return a


def unwritten_chunk_case(root):
    """write_empty_chunks=False: a chunk left at fill (NaN) is never stored."""
    z = root.create_dataset("f4_unwritten_chunk", shape=(8, 8), chunks=(4, 4), dtype="<f4", fill_value=np.nan,
                            write_empty_chunks=False)
    data = floats((8, 8), "<f4")
    data[4:, 0:4] = np.nan  # chunk 1.0 is all fill
    z[...] = data
    assert not os.path.exists(os.path.join(root.store.path, "f4_unwritten_chunk", "1.0")), "chunk 1.0 was written"
    return z


def anemoi_like(root):
    """anemoi-datasets' `data`: [dates, variables, ensembles, cells], one date per chunk, NaNs."""
    dates, variables, cells = 6, 5, 40
    z = make(root, "data", floats((dates, variables, 1, cells), "<f4", 0.05), (1, variables, 1, cells),
             fill_value=np.nan)
    root.attrs.update({"variables": ["10u", "10v", "2t", "msl", "tp"], "frequency": "6h",
                       "start_date": "1979-01-01T00:00:00", "end_date": "1979-01-02T06:00:00",
                       "missing_dates": [], "resolution": "o96"})
    return z


def write_bad(path):
    """Arrays the C++ reader must reject, each written by zarr itself."""
    root = zarr.open_group(zarr.DirectoryStore(path), mode="w")
    x = floats((6, 4), "<f4")
    make(root, "big_endian", x.astype(">f4"), (3, 2))
    make(root, "complex", x.astype("<c8"), (3, 2))
    make(root, "datetime_ns", np.arange(4).astype("<M8[ns]"), (2,))
    make(root, "zlib", x, (3, 2), compressor=numcodecs.Zlib(level=1))
    make(root, "zstd", x, (3, 2), compressor=numcodecs.Zstd(level=1))
    make(root, "gzip", x, (3, 2), compressor=numcodecs.GZip(level=1))
    make(root, "delta_filter", x, (3, 2), filters=[numcodecs.Delta(dtype="<f4")])
    make(root, "order_f", x, (3, 2), order="F")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    root = zarr.open_group(zarr.DirectoryStore(os.path.join(out, "zoo.zarr")), mode="w")
    index = {}
    for name, z in write_cases(root).items():
        z = zarr.open_array(os.path.join(out, "zoo.zarr", name), mode="r")  # read back as a reader would
        got = np.ascontiguousarray(z[...])
        assert got.dtype.byteorder in "<|=", got.dtype
        got.tofile(os.path.join(out, "expected", name + ".bin"))
        index[name] = {"dtype": got.dtype.str, "shape": list(z.shape), "chunks": list(z.chunks)}
    with open(os.path.join(out, "expected", "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    write_bad(os.path.join(out, "bad.zarr"))


if __name__ == "__main__":
    main()
