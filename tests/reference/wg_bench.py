"""Training-speed benchmark of the WeatherGenerator twin on step dumps (`wg_twin.py bench`).

Owns: training the twin, per recomputation mode, on the batches of K step dumps
(docs/step-dump.md; same model, different batches) and reporting step times,
the step's peak memory and the losses as JSON. bench/vs_pytorch.cpp runs it
side by side with the C++ trainer.

Per mode: the model is built from the first dump's `model` metadata and loads its
`params.*` (every mode starts from the same weights; the generator is seeded with
--seed first, so every mode draws the same dropout masks); the tables are the
first dump's `tables.*`; the batches are built from the dumps' `batch.*` tensors
before any step (input tensors made, as the C++ step's are). Then W warm-up and
N timed steps, step i on batch i % K, in train mode with dropout as the metadata
configures it (plus the rates the twin fixes as upstream: the prediction
engine's 0.1 and the embed's final 0.1, which --embed-dropout-final-rate
overrides, as the C++ trainer's `embed_dropout_final_rate` key does), or with
every rate 0 under --no-dropout. A step is: zero_grad (set to none, as
upstream), forward, LossPhysical (training config), loss.item(), backward, clip_grad_norm_ over all
parameters at --grad-clip, AdamW (torch.optim.AdamW, its defaults otherwise)
with step i's lr and β1 from --lr / --beta1 (comma lists, one value per step;
the last repeats), β2, eps and weight decay; a non-finite loss skips clipping
and the optimizer step. The wall time of the whole step is recorded.

Peak memory: torch.profiler (CPU activity, profile_memory) around each of P extra
steps after the timed ones (batches (W+N) % K, ...), one profile per step; the
CPU '[memory]' events, ordered by start time, summed cumulatively (frees
negative) from 0 at the step's start, the last step's gradients set to none
before it (as the C++ side measures from there); the step peak is the maximum
of that sum, and the mode's is the maximum over the P steps. Profiled steps are not timed.
The phases of each timed step (forward + loss + item, backward, clipping,
optimizer) are also reported, as medians.

--device cuda (torch >= 2.0, the GPU check bench/gpu/run.sh): torch's default
device is set to it before the models are built, the batches and tables are
moved there, each phase ends with torch.cuda.synchronize(), and the peaks come
from the caching allocator (below), and AdamW is torch's fused one. --bf16
runs forward and loss under torch.autocast(bfloat16), as upstream's
with_mixed_precision.
"""
import gc
import json
import os
import statistics
import time
from collections import OrderedDict

import torch

import safetensors_io as st
from wg_layers import set_dropout
from wg_loss import compute_loss
from wg_model import WGModel, StreamEmbedTransformer
from wg_pieces import SECTIONS
from wg_step import Batch, DumpError, batch_from_tensors, read_dump

MEMORY_METHOD = ("torch.profiler.profile(activities=[CPU], profile_memory=True) around each of {n} extra "
                 "steps after the timed ones (one profile per step, batches (W+N) % K onwards); CPU "
                 "'[memory]' events ordered by start time, cumulative sum of their sizes (frees negative) "
                 "from 0 at the step's start (the last step's gradients set to none before it); "
                 "step_peak_bytes = max over those steps of the maximum of that sum (every CPU tensor "
                 "allocation through c10's allocator, not oneDNN/BLAS scratch)")
TIME_METHOD = ("time.perf_counter() around the whole step (zero_grad set to none, forward, LossPhysical, "
               "loss.item(), backward, clip_grad_norm_, AdamW) on batches built before the step")
CUDA_MEMORY_METHOD = ("torch.cuda caching allocator around each of {n} extra steps after the timed ones (the "
                      "last step's gradients set to none first): step_peak_bytes = max_memory_allocated() "
                      "during the step minus memory_allocated() at its start; peak_reserved_bytes and "
                      "peak_allocated_bytes: max_memory_reserved() and max_memory_allocated() during those steps "
                      "(absolute: weights, gradients and optimizer state included)")
CUDA_TIME_METHOD = (TIME_METHOD + ", torch.cuda.synchronize() before each reading of the clock; torch's default "
                    "device set to CUDA (its mode adds a little host time to every torch call); AdamW fused")


def to_device(batch, device):
    """The Batch with every tensor on `device`."""
    def move(v):
        if isinstance(v, torch.Tensor):
            return v.to(device)
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v
    data = [[move(d) for d in row] for row in batch.data]
    return Batch(batch.B, data, batch.source_cell_lens.to(device),
                 [move(t) for t in batch.target_coords_idxs])


def use_device(name):
    """torch.device for --device; for CUDA, made torch's default device (the twin creates its
    index tensors and tables without naming a device)."""
    device = torch.device(name)
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"--device {name}: cpu or cuda")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {name}: torch {torch.__version__} sees no CUDA device")
    if not hasattr(torch, "set_default_device"):
        raise ValueError(f"--device {name} needs torch >= 2.0 (torch.set_default_device); this is {torch.__version__}")
    torch.set_default_device(device)
    return device


def parse_modes(text):
    """'none,full,selective,every_n=2' -> [(label, {section: (mode, n)})]."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        mode, _, n = item.partition("=")
        if mode not in ("none", "full", "selective", "every_n"):
            raise ValueError(f"unknown mode '{item}' (none, full, selective, every_n=N)")
        if mode == "every_n":
            if not n or int(n) < 1:
                raise ValueError(f"'{item}': every_n needs =N with N >= 1")
        elif n:
            raise ValueError(f"'{item}': only every_n takes =N")
        out.append((item, {s: (mode, int(n) if n else 1) for s in SECTIONS}))
    if not out:
        raise ValueError("no modes given")
    return out


def per_step(text, name):
    """'a,b,c' -> [a, b, c] (floats); the last value repeats for later steps."""
    vals = [float(v) for v in str(text).split(",") if v.strip()]
    if not vals:
        raise ValueError(f"--{name} needs at least one value")
    return vals


def at(vals, i):
    return vals[min(i, len(vals) - 1)]


def load_dumps(paths):
    """(cfg, model JSON text, params, tables, batches) of K dumps of one model."""
    cfg, model_text, params, tables, batches = None, None, None, None, []
    for path in paths:
        tensors, meta, c, B = read_dump(path)
        if any(k.startswith("params.") and v.dtype != torch.float32 for k, v in tensors.items()):
            raise DumpError(f"{path}: the benchmark runs float32 dumps only")
        if model_text is None:
            cfg, model_text = c, meta["model"]
            params = OrderedDict((k[len("params."):], v) for k, v in tensors.items() if k.startswith("params."))
            tables = {k[len("tables."):]: v for k, v in tensors.items() if k.startswith("tables.")}
            for need in ("pe_embed", "pe_global", "hp_nbours"):
                if need not in tables:
                    raise DumpError(f"{path}: lacks tables.{need}")
        else:
            if json.loads(meta["model"]) != json.loads(model_text):
                raise DumpError(f"{path}: another model than {paths[0]} (metadata 'model' differs)")
            for k, v in params.items():
                if not torch.equal(tensors[f"params.{k}"], v):
                    raise DumpError(f"{path}: params.{k} differs from {paths[0]}: the dumps must share weights")
        batches.append(batch_from_tensors(tensors, cfg, B, torch.float32))
    return cfg, params, tables, batches


def profiled_peak(step, opt):
    """Peak of CPU allocations above the level at the start of one call of step(), the
    last step's gradients set to none first (step()'s own zero_grad then frees nothing)."""
    from torch.profiler import ProfilerActivity, profile

    opt.zero_grad(set_to_none=True)
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


def cuda_peaks(step, opt):
    """(step peak above the start, peak reserved, peak allocated) of one call of step() on CUDA,
    the last step's gradients set to none first."""
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - start, torch.cuda.max_memory_reserved(),
            torch.cuda.max_memory_allocated())


def bench_mode(label, sections, cfg, params, tables, batches, a, lrs, beta1s, device):
    cuda = device.type == "cuda"
    if cuda:  # what the last mode's model and optimizer left cached goes back first
        gc.collect()
        torch.cuda.empty_cache()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(a.seed)
    model = WGModel(cfg)
    model.load_state_dict(params, strict=True)
    model.train()
    if a.no_dropout:
        set_dropout(model, 0.0)
    elif a.embed_dropout_final_rate is not None:
        for m in model.modules():
            if isinstance(m, StreamEmbedTransformer):
                m.dropout_final.p = a.embed_dropout_final_rate
    recomputed = model.set_recompute_mode(sections)
    total = len(model.pieces())
    plist = list(model.parameters())
    # On CUDA the fused AdamW, as a PyTorch user on a GPU runs it; it also keeps its step counters on
    # the GPU (the foreach one, under the CUDA default device, would sync on each counter's .item()).
    opt = torch.optim.AdamW(plist, lr=at(lrs, 0), betas=(at(beta1s, 0), a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay, **({"fused": True} if cuda else {}))
    torch.manual_seed(a.seed)  # the same dropout draws in every mode
    K, counter, losses, skipped, phases = len(batches), [0], [], [], []
    clock = time.perf_counter

    def step():
        i = counter[0]
        counter[0] += 1
        batch = batches[i % K]
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=a.bf16):
            preds = model(batch, tables)
            loss = compute_loss(cfg, batch, preds, train=True)
        value = loss.item()
        losses.append(value)
        if not (value == value and abs(value) != float("inf")):
            skipped.append(i)
            return
        t1 = clock()
        loss.backward()
        del loss, preds
        sync()
        t2 = clock()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, a.grad_clip)
        sync()
        t3 = clock()
        for g in opt.param_groups:
            g["lr"] = at(lrs, i)
            g["betas"] = (at(beta1s, i), a.beta2)
        opt.step()
        sync()
        phases.append((t1 - t0, t2 - t1, t3 - t2, clock() - t3))

    times, timed_phases = [], []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
            if phases and len(phases) == i + 1 - len(skipped):
                timed_phases.append(phases[-1])
    reserved = allocated = None
    if cuda:
        measured = [cuda_peaks(step, opt) for _ in range(a.profiled_steps)]
        peaks = [int(m[0]) for m in measured]
        reserved = max((int(m[1]) for m in measured), default=None)
        allocated = max((int(m[2]) for m in measured), default=None)
    else:
        peaks = [int(profiled_peak(step, opt)) for _ in range(a.profiled_steps)]
    med = statistics.median(times) if times else None
    print(f"twin bench: {label:12s} {recomputed:3d}/{total} pieces, median "
          f"{'-' if med is None else f'{med * 1e3:.2f}'} ms, peak "
          f"{max(peaks) / 2**20 if peaks else 0:.2f} MiB"
          f"{'' if reserved is None else f' (reserved {reserved / 2**30:.2f} GiB)'}, "
          f"loss {losses[0]:.6g} -> {losses[-1]:.6g}", flush=True)
    return {"mode": label, "pieces_recomputed": recomputed, "pieces_total": total,
            "recomputed_pieces": sorted(model.recompute),
            "step_seconds": times, "step_seconds_median": med,
            "step_peak_bytes": max(peaks) if peaks else None, "step_peak_bytes_per_profiled_step": peaks,
            "peak_reserved_bytes": reserved, "peak_allocated_bytes": allocated,
            "phase_seconds_median": {name: statistics.median(p[j] for p in timed_phases)
                                     for j, name in enumerate(("forward_loss", "backward", "clip", "optimizer"))}
            if timed_phases else None,
            "losses": losses, "skipped_steps": skipped,
            "lr": [at(lrs, i) for i in range(len(losses))], "beta1": [at(beta1s, i) for i in range(len(losses))]}


def add_arguments(p):
    p.add_argument("dumps", nargs="+", help="step dumps (same model and weights, different batches)")
    p.add_argument("--modes", default="none,full,selective,every_n=2",
                   help="comma list: none, full, selective, every_n=N (every section)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--profiled-steps", type=int, default=2, help="extra steps measured for peak memory")
    p.add_argument("--lr", default="1e-4", help="learning rate per step (comma list; the last repeats)")
    p.add_argument("--beta1", default="0.9", help="AdamW β1 per step (comma list; the last repeats)")
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm (0: no clipping)")
    p.add_argument("--seed", type=int, default=42, help="seeds the generator before every mode")
    p.add_argument("--embed-dropout-final-rate", type=float, default=None,
                   help="rate of the embed's final dropout (default: upstream's fixed 0.1)")
    p.add_argument("--no-dropout", action="store_true", help="every dropout rate 0 (loss parity checks)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (torch >= 2.0)")
    p.add_argument("--bf16", action="store_true", help="forward and loss under torch.autocast(bfloat16)")
    p.add_argument("--out", required=True, help="JSON results")


def run(a):
    """Runs the benchmark for parsed arguments; returns the exit code."""
    if a.steps < 0 or a.warmup < 0 or a.profiled_steps < 0 or a.threads < 1:
        raise ValueError("--steps, --warmup, --profiled-steps must be >= 0 and --threads >= 1")
    torch.set_num_threads(a.threads)
    modes = parse_modes(a.modes)
    lrs, beta1s = per_step(a.lr, "lr"), per_step(a.beta1, "beta1")
    cfg, params, tables, batches = load_dumps(a.dumps)  # on the CPU, before a default device is set
    device = use_device(a.device)
    if device.type != "cpu":
        batches = [to_device(b, device) for b in batches]
        tables = {k: v.to(device) for k, v in tables.items()}
    results = [bench_mode(label, sections, cfg, params, tables, batches, a, lrs, beta1s, device)
               for label, sections in modes]
    cuda = device.type == "cuda"
    doc = {"implementation": "pytorch twin (tests/reference/wg_model.py, eager)",
           "torch_version": torch.__version__, "threads": torch.get_num_threads(),
           "environment": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
           "device": str(device), "gpu": torch.cuda.get_device_name(device) if cuda else None,
           "autocast": "bfloat16" if a.bf16 else None,
           "dumps": list(a.dumps), "warmup": a.warmup, "steps": a.steps, "profiled_steps": a.profiled_steps,
           "optimizer": {"name": "torch.optim.AdamW", "beta2": a.beta2, "eps": a.eps,
                         "weight_decay": a.weight_decay, "grad_clip": a.grad_clip},
           "dropout": "off" if a.no_dropout else {"as": "model metadata, pred engine 0.1",
                                                  "embed_dropout_final_rate": a.embed_dropout_final_rate
                                                  if a.embed_dropout_final_rate is not None else 0.1},
           "recompute": "torch.utils.checkpoint(use_reentrant=False, preserve_rng_state=True) per piece",
           "step_seconds_method": CUDA_TIME_METHOD if cuda else TIME_METHOD,
           "step_peak_bytes_method": (CUDA_MEMORY_METHOD if cuda else MEMORY_METHOD).format(n=a.profiled_steps),
           "modes": results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)
    return 0


def errors():
    """The exceptions `run` reports as bad input (exit 2)."""
    return (DumpError, st.SafetensorsError, ValueError, KeyError, OSError, NotImplementedError)
