#!/usr/bin/python3
"""Command-line entry of the PyTorch twin of the C++ trainer.

Owns the commands that the C++ tests and benchmarks call (files are
safetensors unless said otherwise):
  reference  whole model: forward, masked loss, backward -> loss, preds, grads
  embed      one StreamEmbedTransformer: forward, mean(out^2) backward
  roundtrip  load weights strictly, write the state_dict back (stored dtypes)
  bench      train with each checkpoint mode: step times and peak memory (JSON)
The modules are in twin_model.py, the file format in safetensors_io.py.
Run with Debian's Python: /usr/bin/python3 tests/reference/twin.py ...
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import twin_model as tm  # noqa: E402

BENCH_EVERY_N = 2
MEMORY_METHOD = ("torch.profiler.profile(activities=[CPU], profile_memory=True) around each of "
                 "{n} extra steps (one profile per step); memory events ('[memory]', CPU) ordered by "
                 "start time, cumulative sum of their sizes (frees negative) starting at 0 at step "
                 "start; step_peak_bytes = max over those steps of the maximum of that sum")


def fail(msg):
    print(f"twin: {msg}", file=sys.stderr)
    sys.exit(1)


def load_strict(module, tensors, what):
    """Copies tensors into module's parameters; every name and shape must match.

    Returns {name: stored dtype}. On any mismatch prints all of them and exits 1.
    """
    params = dict(module.state_dict(keep_vars=True))
    problems = []
    for name, p in params.items():
        if name not in tensors:
            problems.append(f"missing: {name} {list(p.shape)}")
        elif tuple(tensors[name].shape) != tuple(p.shape):
            problems.append(f"shape mismatch: {name} stored {list(tensors[name].shape)}, model {list(p.shape)}")
        elif not tensors[name].is_floating_point():
            problems.append(f"dtype mismatch: {name} stored {tensors[name].dtype}, model needs a float type")
    problems += [f"unexpected: {name} {list(t.shape)}" for name, t in tensors.items() if name not in params]
    if problems:
        print(f"twin: {what}: {len(problems)} mismatch(es) with the model:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name].to(p.dtype))
    return {name: tensors[name].dtype for name in params}


def stream_inputs(tensors, streams, prefix=""):
    """The model's per-stream inputs from tensors named <prefix><S>.{values,centroids,visible,masked}."""
    out = []
    for s in streams:
        try:
            out.append({"stream": s,
                        "values": tensors[f"{prefix}{s}.values"].float(),
                        "centroids": tensors[f"{prefix}{s}.centroids"].float(),
                        "visible": tensors[f"{prefix}{s}.visible"].long(),
                        "masked": tensors[f"{prefix}{s}.masked"].long()})
        except KeyError as e:
            fail(f"inputs lack tensor {e}")
    return out


def stream_names(meta, cfg, path):
    if "streams" not in meta:
        fail(f"{path}: metadata has no 'streams'")
    names = [s for s in meta["streams"].split(",") if s]
    known = {s["name"] for s in cfg["streams"]}
    unknown = [s for s in names if s not in known]
    if unknown:
        fail(f"{path}: streams {unknown} are not in the config (config has {sorted(known)})")
    return names


def meta_int(meta, key, path):
    if key not in meta:
        fail(f"{path}: metadata has no '{key}'")
    return int(meta[key])


def grads_of(module):
    return {f"grad.{n}": p.grad.detach().float() for n, p in module.named_parameters() if p.grad is not None}


# ---------------------------------------------------------------- commands


def cmd_reference(a):
    cfg = tm.load_config(a.config)
    model = tm.WeatherModel(cfg)
    load_strict(model, st.read(a.weights)[0], a.weights)
    model.eval()
    if a.checkpoint:
        model.set_mode("full")
    tensors, meta = st.read(a.inputs)
    streams = stream_inputs(tensors, stream_names(meta, cfg, a.inputs))
    preds = model(meta_int(meta, "batch_size", a.inputs), streams)
    loss = tm.masked_loss(cfg, streams, preds, tm.masked_targets(streams))
    loss.backward()
    out = {"loss": loss.detach().float().reshape([])}
    out.update({f"pred.{si['stream']}": p.detach().float() for si, p in zip(streams, preds)})
    out.update(grads_of(model))
    st.write(a.out, out)
    print(f"twin reference: loss {loss.item():.8g}, {len(out) - 1 - len(preds)} gradients -> {a.out}")


def cmd_embed(a):
    with open(a.spec) as f:
        spec = json.load(f)
    keys = ["num_tokens", "token_size", "num_channels", "dim_embed", "dim_out", "num_blocks", "num_heads",
            "norm_type", "embed_size_centroids", "unembed_mode"]
    unknown = sorted(set(spec) - set(keys))
    if unknown:
        fail(f"{a.spec}: unknown keys {unknown}")
    model = tm.StreamEmbedTransformer(**spec)
    load_strict(model, st.read(a.weights)[0], a.weights)
    model.eval()
    if a.checkpoint:
        io, blocks = tm.section_pieces("full", len(model.layers) // 2)
        model.set_plan(io, blocks)
    tensors, _ = st.read(a.inputs)
    if "x_in" not in tensors:
        fail(f"{a.inputs}: no tensor 'x_in'")
    x_in = tensors["x_in"].float().requires_grad_(True)
    cen = tensors["centroids"].float() if "centroids" in tensors else None
    out = model(x_in, cen)
    out.pow(2).mean().backward()
    result = {"out": out.detach()}
    result.update(grads_of(model))
    result["grad.x_in"] = x_in.grad.detach()
    st.write(a.out, result)
    print(f"twin embed: out {list(out.shape)}, {len(result) - 1} gradients -> {a.out}")


def cmd_roundtrip(a):
    cfg = tm.load_config(a.config)
    model = tm.WeatherModel(cfg)
    tensors, meta = st.read(a.weights)
    stored = load_strict(model, tensors, a.weights)
    lossy = sorted(n for n, d in stored.items() if d == torch.float64)
    if lossy:
        print(f"twin roundtrip: warning: {len(lossy)} F64 tensors pass through float32 (not exact)",
              file=sys.stderr)
    # parameters only: the model has no buffers; each tensor back in its stored dtype
    out = {n: t.detach().to(stored[n]) for n, t in model.state_dict().items()}
    st.write(a.out, out, meta or None)
    print(f"twin roundtrip: {len(out)} tensors -> {a.out}")


def profiled_peak(step):
    """Peak of CPU allocations above the level at the start of one call of step()."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_us())  # stable: equal times keep the recorded order
    level = peak = 0
    for e in events:
        level += e.nbytes()
        peak = max(peak, level)
    return peak


def cmd_bench(a):
    torch.set_num_threads(a.threads)
    cfg = tm.load_config(a.config)
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        tm.section_pieces(m, 1)  # rejects unknown modes before any work
    tensors, meta = st.read(a.batches)
    names = stream_names(meta, cfg, a.batches)
    B, nb = meta_int(meta, "batch_size", a.batches), meta_int(meta, "num_batches", a.batches)
    batches = [stream_inputs(tensors, names, f"batch{k}.") for k in range(nb)]
    targets = [tm.masked_targets(b) for b in batches]

    torch.manual_seed(int(cfg["seed"]))
    init_model = tm.WeatherModel(cfg)
    if a.weights:
        load_strict(init_model, st.read(a.weights)[0], a.weights)
    init_state = copy.deepcopy(init_model.state_dict())
    clip, profiled_steps = float(cfg["grad_clip"]), 2

    results = []
    for mode in modes:
        model = tm.WeatherModel(cfg)
        model.load_state_dict(init_state)
        model.set_mode(mode, BENCH_EVERY_N)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr_max"]),
                                weight_decay=float(cfg["weight_decay"]))
        torch.manual_seed(int(cfg["seed"]))  # same dropout draws for every mode
        counter, losses = [0], []

        def step():
            k = counter[0] % nb
            counter[0] += 1
            opt.zero_grad(set_to_none=False)
            preds = model(B, batches[k])
            loss = tm.masked_loss(cfg, batches[k], preds, targets[k])
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            losses.append(loss.item())

        times = []
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            step()
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
        peak = max(profiled_peak(step) for _ in range(profiled_steps))
        med = statistics.median(times) if times else None
        results.append({"mode": mode, "step_seconds": times, "step_seconds_median": med,
                        "step_peak_bytes": int(peak), "losses": losses})
        print(f"twin bench: {mode:10s} median {med if med is None else round(med * 1e3, 3)} ms, "
              f"peak {peak / 2**20:.2f} MiB")

    doc = {"implementation": "pytorch", "threads": a.threads, "torch_version": torch.__version__,
           "every_n": BENCH_EVERY_N, "warmup": a.warmup, "steps": a.steps,
           "step_peak_bytes_method": MEMORY_METHOD.format(n=profiled_steps), "modes": results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)


# ---------------------------------------------------------------- arguments


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("reference", help="whole model: forward, loss, backward")
    r.add_argument("--config", required=True)
    r.add_argument("--weights", required=True)
    r.add_argument("--inputs", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--checkpoint", action="store_true", help="recompute every piece in backward")
    r.set_defaults(fn=cmd_reference)

    e = sub.add_parser("embed", help="one StreamEmbedTransformer: forward, mean(out^2) backward")
    e.add_argument("--spec", required=True)
    e.add_argument("--weights", required=True)
    e.add_argument("--inputs", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--checkpoint", action="store_true", help="recompute every piece in backward")
    e.set_defaults(fn=cmd_embed)

    t = sub.add_parser("roundtrip", help="load weights strictly and write them back")
    t.add_argument("--config", required=True)
    t.add_argument("--weights", required=True)
    t.add_argument("--out", required=True)
    t.set_defaults(fn=cmd_roundtrip)

    b = sub.add_parser("bench", help="train per checkpoint mode; step time and peak memory")
    b.add_argument("--config", required=True)
    b.add_argument("--batches", required=True)
    b.add_argument("--modes", default="none,selective,every_n,full")
    b.add_argument("--steps", type=int, default=10)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--out", required=True)
    b.add_argument("--weights")
    b.set_defaults(fn=cmd_bench)

    a = p.parse_args(argv)
    try:
        a.fn(a)
    except (st.SafetensorsError, OSError, ValueError) as err:
        fail(str(err))


if __name__ == "__main__":
    main()
