#!/usr/bin/python3
"""Command line of the WeatherGenerator model twin (independent PyTorch reading of wg-model.md).

Owns the commands (files are safetensors step dumps, docs/step-dump.md):
  check FILE       run the dumped training step in the twin and compare every
                   out.*, the loss and every grads.* (exit 1 and name the tensors
                   on a mismatch)
  make-dump FILE   write a dump of the twin's own step: random weights and a
                   synthetic batch (wg_synth.py), optionally with --config-json
  perturb IN OUT   copy a dump with one tensor scaled by (1 + rel), to test check
  export-weights DUMP OUT
                   load a dump's params.* into the twin by state_dict name,
                   shift every floating tensor by a small deterministic
                   amount (so the file differs from the dump) and save the
                   twin's state_dict as safetensors (or, when OUT ends in
                   .chkpt, with torch.save as WeatherGenerator saves its
                   weights): weights made by the twin, for `wgtrain --init-weights`
  load-chkpt CHKPT DUMP
                   torch.load(CHKPT, weights_only=True) a .chkpt written by
                   wgtrain and load_state_dict(strict=True) it into the twin
                   built from the dump's config
  count            build the default model (one ERA5 stream) on the meta device,
                   print the number of state_dict tensors and parameters
  bench DUMP...    train the twin per recomputation mode on the dumps' batches
                   (wg_bench.py): step times, step peak memory, losses (JSON)
Run with Debian's Python: /usr/bin/python3 tests/reference/wg_twin.py ...
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import wg_config as wc  # noqa: E402
import wg_layers  # noqa: E402
import wg_bench  # noqa: E402
import wg_step  # noqa: E402
import wg_synth  # noqa: E402
from wg_model import WGModel  # noqa: E402
from wg_tables import Tables  # noqa: E402


def count_default():
    """(tensors, parameters) of the default config built on the meta device."""
    wg_layers.set_build_device("meta")
    try:
        model = WGModel(wc.model_config())
    finally:
        wg_layers.set_build_device(None)
    sd = model.state_dict()
    return model, len(sd), sum(t.numel() for t in sd.values())


def _config_overlay(text):
    if not text:
        return {}
    if os.path.exists(text):
        with open(text) as f:
            return json.load(f)
    return json.loads(text)


def cmd_make_dump(a):
    torch.manual_seed(a.seed)
    cfg = wg_synth.small_config(_config_overlay(a.config_json))
    model = WGModel(cfg)
    tables = Tables(cfg).as_dict()
    batch = wg_synth.synthetic_batch(cfg, B=a.batch_size, seed=a.seed)
    t = wg_step.write_dump(a.file, cfg, model, tables, batch, step=a.step)
    print(f"wrote {a.file}: {len(t)} tensors, loss {float(t['loss']):.6g}, B {batch.B}, "
          f"C {wc.num_cells(cfg)}, streams {[s['name'] for s in cfg['streams']]}")
    return 0


def cmd_check(a):
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        return wg_step.check_dump(a.file, rtol=a.rtol, atol_rel=a.atol_rel, show=a.show)
    except (wg_step.DumpError, st.SafetensorsError, NotImplementedError, KeyError, ValueError) as e:
        print(f"wg_twin: {e}", file=sys.stderr)
        return 2


def cmd_perturb(a):
    tensors, meta = st.read(a.input)
    if a.tensor not in tensors:
        print(f"wg_twin: {a.input} has no tensor {a.tensor}", file=sys.stderr)
        return 2
    tensors[a.tensor] = tensors[a.tensor] * (1.0 + a.rel)
    st.write(a.output, tensors, meta)
    print(f"wrote {a.output}: {a.tensor} scaled by 1 + {a.rel:g}")
    return 0


def cmd_export_weights(a):
    try:
        tensors, _meta, cfg, _B = wg_step.read_dump(a.dump)
    except (wg_step.DumpError, st.SafetensorsError) as e:
        print(f"wg_twin: {e}", file=sys.stderr)
        return 2
    model = WGModel(cfg)
    params = {k[len("params."):]: v.float() for k, v in tensors.items() if k.startswith("params.")}
    model.load_state_dict(params, strict=True)  # by name, no mapping
    out = {}
    with torch.no_grad():
        for i, (name, t) in enumerate(model.state_dict().items()):
            if t.is_floating_point():
                k = torch.arange(t.numel(), dtype=torch.float64).reshape(t.shape)
                t = (t.double() + a.shift * torch.sin(k + i)).float()
            out[name] = t.contiguous()
    if a.output.endswith(".chkpt"):  # as upstream's trainer: torch.save(model.state_dict())
        model.load_state_dict(out, strict=True)
        torch.save(model.state_dict(), a.output)
    else:
        st.write(a.output, out, {"format": "pt", "written_by": "tests/reference/wg_twin.py export-weights"})
    print(f"wrote {a.output}: {len(out)} tensors from the twin's state_dict")
    return 0


def cmd_load_chkpt(a):
    _tensors, _meta, cfg, _B = wg_step.read_dump(a.dump)
    sd = torch.load(a.chkpt, map_location="cpu", weights_only=True)
    model = WGModel(cfg)
    model.load_state_dict(sd, strict=True)
    names = list(model.state_dict())
    if list(sd) != names:
        print("wg_twin load-chkpt: the names are not in the state_dict's order", file=sys.stderr)
        return 1
    print(f"{a.chkpt}: {len(sd)} tensors ({type(sd).__name__}), torch.load(weights_only=True) and "
          f"load_state_dict(strict=True) into the twin")
    return 0


def cmd_count(_a):
    _, n_t, n_p = count_default()
    print(f"default config, one ERA5 stream: {n_t} state_dict tensors, {n_p:,} parameters")
    return 0


def cmd_bench(a):
    try:
        return wg_bench.run(a)
    except wg_bench.errors() as e:
        print(f"wg_twin bench: {e}", file=sys.stderr)
        return 2


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="compare the twin with a --dump-step file")
    c.add_argument("file")
    c.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance per element")
    c.add_argument("--atol-rel", type=float, default=1e-6,
                   help="absolute floor as a fraction of the dumped tensor's max |value|")
    c.add_argument("--show", type=int, default=12, help="rows of the worst-deviation table")
    c.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    m = sub.add_parser("make-dump", help="write a dump of the twin's own step (synthetic)")
    m.add_argument("file")
    m.add_argument("--config-json", default="", help="JSON (text or file) laid over the small config")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--batch-size", type=int, default=2)
    m.add_argument("--step", type=int, default=0)
    q = sub.add_parser("perturb", help="copy a dump with one tensor scaled by (1 + rel)")
    q.add_argument("input")
    q.add_argument("output")
    q.add_argument("--tensor", required=True)
    q.add_argument("--rel", type=float, default=2e-5)
    e = sub.add_parser("export-weights", help="the twin's state_dict (loaded from a dump, shifted) as safetensors")
    e.add_argument("dump")
    e.add_argument("output")
    e.add_argument("--shift", type=float, default=1e-3, help="amplitude of the deterministic shift")
    lc = sub.add_parser("load-chkpt", help="load a wgtrain .chkpt strictly into the twin of a dump's config")
    lc.add_argument("chkpt")
    lc.add_argument("dump")
    sub.add_parser("count", help="state_dict tensors and parameters of the default config")
    b = sub.add_parser("bench", help="train per recomputation mode on step dumps; times, peak memory (JSON)")
    wg_bench.add_arguments(b)
    a = p.parse_args(argv)
    return {"check": cmd_check, "make-dump": cmd_make_dump, "perturb": cmd_perturb, "count": cmd_count,
            "export-weights": cmd_export_weights, "load-chkpt": cmd_load_chkpt,
            "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
