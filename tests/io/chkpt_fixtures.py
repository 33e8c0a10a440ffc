#!/usr/bin/env python3
"""torch.save checkpoints for tests/io/test_chkpt.cpp, with Debian's
python3-torch (/usr/bin/python3).

    chkpt_fixtures.py write DIR
        DIR/<name>.chkpt, written by torch.save, and DIR/expected/<name>/:
        index.json ([{name, dtype, shape, bin}] in the file's order) and
        each tensor's contiguous little-endian bytes (<n>.bin):
          module      TinyNet().state_dict() (an OrderedDict with _metadata)
          module_p4   the same, pickle_protocol=4 (FRAME, MEMOIZE, STACK_GLOBAL)
          ddp         the same under "module." (a DistributedDataParallel save)
          zoo         a plain dict: every dtype, a transpose, two views of one
                      storage, a far offset, steps, an expand, 0-d, empty, a
                      Parameter
        and, with no expectations, files read_chkpt must refuse: complex
        (a complex64 tensor), int32, nested ({"model": state_dict}), legacy
        (_use_new_zipfile_serialization=False).

    chkpt_fixtures.py check FILE EXPECTED_DIR [--module]
        torch.load(FILE, weights_only=True) must be an OrderedDict with
        EXPECTED_DIR's names (in order), dtypes, shapes and bytes; with
        --module it must also load into TinyNet with strict=True. Exit 1
        listing every difference.
"""
import collections
import json
import pathlib
import sys

import torch
from torch import nn

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.uint8: "U8"}


class TinyNet(nn.Module):
    """tests/io/test_chkpt.cpp builds the same module in C++."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.embed = nn.Embedding(5, 2)


def raw(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def write_expected(directory, tensors):
    directory.mkdir(parents=True)
    index = []
    for n, (name, t) in enumerate(tensors.items()):
        (directory / f"{n}.bin").write_bytes(raw(t))
        index.append({"name": name, "dtype": DTYPES[t.dtype], "shape": list(t.shape), "bin": f"{n}.bin"})
    (directory / "index.json").write_text(json.dumps(index, indent=1))


def tiny_net():
    torch.manual_seed(0)
    net = TinyNet()
    with torch.no_grad():
        for p in net.parameters():  # LayerNorm starts at ones and zeros: make every value tell
            p.copy_(torch.randn_like(p))
    return net


def zoo():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(3, 5, generator=g)
    shared = torch.arange(20, dtype=torch.float32)
    far = torch.randn(70000, generator=g)
    grid = torch.arange(30, dtype=torch.float32).view(5, 6)
    return {
        "f32": torch.randn(3, 4, generator=g),
        "f64": torch.randn(2, 3, dtype=torch.float64, generator=g),
        "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "f16": torch.randn(2, 2, generator=g).half(),
        "i64": torch.tensor([-3, 0, 7, 2**40, -2**62]),
        "u8": torch.arange(256).to(torch.uint8).view(16, 16),
        "transposed": base.t(),
        "shared.a": shared[2:8],
        "shared.b": shared[10:20].view(2, 5),
        "far": far[66000:66010],
        "stepped": grid[::2, 1::2],
        "expanded": torch.randn(3, 1, generator=g).expand(3, 4),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
        "param": nn.Parameter(torch.randn(2, 3, generator=g)),
    }


def write(out):
    out.mkdir(parents=True, exist_ok=True)
    sd = tiny_net().state_dict()
    assert hasattr(sd, "_metadata")
    ddp = collections.OrderedDict(("module." + k, v) for k, v in sd.items())
    files = {"module": sd, "ddp": ddp, "zoo": zoo()}
    for name, obj in files.items():
        torch.save(obj, out / f"{name}.chkpt")
        write_expected(out / "expected" / name, obj)
    torch.save(sd, out / "module_p4.chkpt", pickle_protocol=4)
    write_expected(out / "expected" / "module_p4", sd)
    torch.save({"ok": torch.ones(2), "a.b": torch.randn(2, dtype=torch.complex64)}, out / "complex.chkpt")
    torch.save({"idx": torch.arange(4, dtype=torch.int32)}, out / "int32.chkpt")
    torch.save({"model": sd, "epoch": 3}, out / "nested.chkpt")
    torch.save(sd, out / "legacy.chkpt", _use_new_zipfile_serialization=False)


def check(path, expected_dir, module):
    problems = []
    sd = torch.load(path, weights_only=True)
    if not isinstance(sd, collections.OrderedDict):
        problems.append(f"torch.load gave a {type(sd).__name__}, not an OrderedDict")
    index = json.loads((expected_dir / "index.json").read_text())
    if list(sd.keys()) != [e["name"] for e in index]:
        problems.append(f"names {list(sd.keys())} != expected {[e['name'] for e in index]}")
    for e in index:
        t = sd.get(e["name"])
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            problems.append(f"{e['name']}: a {type(t).__name__}, not a tensor")
            continue
        if DTYPES.get(t.dtype) != e["dtype"]:
            problems.append(f"{e['name']}: dtype {t.dtype}, expected {e['dtype']}")
        if list(t.shape) != e["shape"]:
            problems.append(f"{e['name']}: shape {list(t.shape)}, expected {e['shape']}")
        elif raw(t) != (expected_dir / e["bin"]).read_bytes():
            problems.append(f"{e['name']}: values differ")
    if module and not problems:
        net = TinyNet()
        try:
            net.load_state_dict(sd, strict=True)
            for name, p in net.named_parameters():
                if not torch.equal(p.detach(), sd[name]):
                    problems.append(f"TinyNet.{name} differs after load_state_dict")
        except RuntimeError as err:
            problems.append(f"load_state_dict(strict=True): {err}")
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    return 1 if problems else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "write":
        write(pathlib.Path(argv[2]))
        return 0
    if len(argv) in (4, 5) and argv[1] == "check" and argv[4:] in ([], ["--module"]):
        return check(pathlib.Path(argv[2]), pathlib.Path(argv[3]), argv[4:] == ["--module"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
