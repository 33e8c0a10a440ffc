"""Safetensors reading and writing in plain Python (numpy + torch).

Owns the file format used between the C++ trainer and its PyTorch twin:
  8 bytes   little-endian u64 N, the length of the JSON header
  N bytes   JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
                  "__metadata__": {str: str} (optional)},
            padded with trailing spaces to a multiple of 8
  rest      raw little-endian tensor data; offsets are relative to the
            start of this buffer

Supported dtypes: F32, F16, BF16, F64, I64 (plus I32, U8, BOOL on reading).
There is no `safetensors` package on this machine, hence this module.
"""
import json
import struct
from collections import OrderedDict

import numpy as np
import torch

# safetensors dtype -> (torch dtype, numpy dtype used to reinterpret the bytes)
_DTYPES = {
    "F32": (torch.float32, np.dtype("<f4")),
    "F16": (torch.float16, np.dtype("<f2")),
    "BF16": (torch.bfloat16, np.dtype("<i2")),  # numpy has no bfloat16: raw 16-bit words
    "F64": (torch.float64, np.dtype("<f8")),
    "I64": (torch.int64, np.dtype("<i8")),
    "I32": (torch.int32, np.dtype("<i4")),
    "U8": (torch.uint8, np.dtype("u1")),
    "BOOL": (torch.bool, np.dtype("?")),
}
_TORCH_TO_NAME = {t: name for name, (t, _) in _DTYPES.items()}


class SafetensorsError(ValueError):
    """A file that is not valid safetensors, or a tensor that cannot be stored."""


def dtype_name(dtype):
    """The safetensors name of a torch dtype (e.g. torch.float32 -> "F32")."""
    if dtype not in _TORCH_TO_NAME:
        raise SafetensorsError(f"dtype {dtype} cannot be stored in safetensors here")
    return _TORCH_TO_NAME[dtype]


def torch_dtype(name):
    """The torch dtype of a safetensors dtype name."""
    if name not in _DTYPES:
        raise SafetensorsError(f"unsupported safetensors dtype '{name}'")
    return _DTYPES[name][0]


def read_header(path):
    """(header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        text = f.read(n)
        if len(text) != n:
            raise SafetensorsError(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=OrderedDict)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid JSON ({e})") from e
    metadata = header.pop("__metadata__", None) or {}
    return header, dict(metadata), 8 + n


def read(path):
    """Returns (OrderedDict name -> tensor in file order, metadata dict).

    Tensors keep the stored dtype; each owns its memory (safe to modify).
    """
    header, metadata, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    # file order = order of the data offsets (JSON key order is not reliable
    # across writers, the offsets are)
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    out = OrderedDict()
    for name, info in entries:
        tdtype, ndtype = _DTYPES.get(info["dtype"], (None, None))
        if tdtype is None:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype '{info['dtype']}'")
        begin, end = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * ndtype.itemsize or end > len(data) or begin < 0:
            raise SafetensorsError(f"{path}: tensor '{name}' offsets {begin}..{end} do not fit "
                                   f"shape {shape} of {info['dtype']} (data is {len(data)} bytes)")
        arr = np.frombuffer(data, dtype=ndtype, count=count, offset=begin).astype(ndtype.newbyteorder("="))
        t = torch.from_numpy(arr.copy()).reshape(shape)
        if info["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t
    return out, metadata


def write(path, tensors, metadata=None):
    """Writes tensors (a mapping name -> tensor) in the caller's order and dtype.

    metadata: optional {str: str}, stored as "__metadata__".
    """
    header = OrderedDict()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        name_dt = dtype_name(t.dtype)
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.numpy().astype(_DTYPES[name_dt][1]).tobytes()
        header[name] = {"dtype": name_dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
