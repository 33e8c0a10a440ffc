#!/usr/bin/env python3
"""The include-order check: the areas of src/ and include/wg/ depend on each
other in one direction only,

    main -> train -> {plan, model, data, config, dist, telemetry} -> {io, util}

(within the middle, as ALLOWED below says), MPI is called only inside dist/,
and the LibTorch-free areas include no LibTorch header. Exits 1 listing every
include that runs against this, 0 when there is none.

    check_includes.py [--root DIR]
"""
import argparse
import pathlib
import re
import sys

# area -> the areas it may include (besides itself)
ALLOWED = {
    "util": set(),
    "io": {"util"},
    "config": {"util"},
    "data": {"config", "io", "util"},
    "dist": {"util"},
    "plan": {"config", "dist", "util"},
    "model": {"plan", "data", "config", "util"},
    "telemetry": {"plan", "dist", "config", "util"},
    "train": {"plan", "model", "data", "config", "dist", "telemetry", "io", "util"},
    "main": {"train", "dist", "util"},
}
TORCH_FREE = {"config", "data", "plan", "telemetry"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TORCH = re.compile(r"^(torch/|ATen/|c10/)")


def area_of(path, root):
    rel = path.relative_to(root).parts
    if rel[0] == "src" and len(rel) == 2:
        return "main"
    if rel[0] == "src":
        return rel[1]
    if rel[0] == "include" and len(rel) > 2 and rel[1] == "wg":
        return rel[2]
    return None


def target_area(name):
    parts = name.split("/")
    if parts[0] == "wg" and len(parts) > 2:
        return parts[1]
    if len(parts) > 1 and parts[0] in ALLOWED:  # private headers: "config/decode.h"
        return parts[0]
    return None


def problems(root):
    out = []
    files = sorted(p for d in ("src", "include") for p in (root / d).rglob("*")
                   if p.suffix in (".h", ".cpp", ".in") and p.is_file())
    for path in files:
        area = area_of(path, root)
        if area is None:
            continue
        if area not in ALLOWED:
            out.append(f"{path.relative_to(root)}: area '{area}' is not in the dependency table")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            quote, name = m.groups()
            where = f"{path.relative_to(root)}:{number}"
            if quote == '"':
                dep = target_area(name)
                if dep and dep != area and dep not in ALLOWED[area]:
                    out.append(f"{where}: {area} includes {name} ({dep}); {area} may include only "
                               f"{', '.join(sorted(ALLOWED[area])) or 'nothing else'}")
            elif name == "mpi.h" and area != "dist":
                out.append(f"{where}: MPI is called only inside dist/, but {area} includes <mpi.h>")
            elif area in TORCH_FREE and TORCH.match(name):
                out.append(f"{where}: {area} is LibTorch-free, but includes <{name}>")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parents[2]))
    root = pathlib.Path(ap.parse_args().root).resolve()
    found = problems(root)
    for p in found:
        print(p)
    print(f"include order: {len(found)} problem(s)" if found else "include order: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
