"""Loss of the WeatherGenerator twin: LossCalculator + LossPhysical (wg-model.md §9.1, §9.2).

Owns: parsing training_mode_config / validation_mode_config, the two loss
functions (mse_channel_location_weighted, mae) with upstream's NaN handling
(target and prediction zeroed where the target is NaN; those entries still count
in the means), stream and channel weights (training only), the divisions by the
numbers of positive terms, spoofed streams (weight 0), and for B > 1 the mean
over samples of each sample's loss (docs/step-dump.md).

Open points (the spec does not say; chosen here and reported):
- sub-steps: with tokenize_spacetime, one per distinct target time when the dump
  carries `target_times.<f>`; otherwise every (stream, fstep) is one sub-step
  (ERA5's 6 h window gives one sub-step upstream too);
- no location weights and timestep weights 1.0 (none configured by default);
- when no loss function (or no fstep) of a stream is positive, the stream adds 0
  instead of dividing by a zero count;
- "non-spoofed streams with data" (§9.2 step 6) = streams with target_weight != 0
  and at least one forecast step whose loss terms are not all zero (upstream's
  ctr_fsteps > 0); that final division is not guarded (no such stream:
  NaN/inf, as upstream).
"""
import torch

LOSS_FCTS = ("mse", "mae")


def loss_terms(mode_config, default_weight):
    """[(module weight, [(fct name, fct weight), ...])] from a *_mode_config value.

    Accepted shapes (the dump's JSON form is not fixed by the spec):
    {"losses": {"LossPhysical": {"weight", "loss_fcts"}}}, {"LossPhysical": {...}},
    or {"weight", "loss_fcts"} directly.
    """
    cfg = mode_config or {}
    if "losses" in cfg:
        cfg = cfg["losses"]
    if "loss_fcts" in cfg:
        cfg = {"LossPhysical": cfg}
    terms = []
    for name, mod in cfg.items():
        if name != "LossPhysical":
            raise NotImplementedError(f"loss module {name} (only LossPhysical is specified)")
        fcts = [(str(f), float(w)) for f, w in mod["loss_fcts"]]
        for f, _ in fcts:
            if f not in LOSS_FCTS:
                raise NotImplementedError(f"loss function {f}")
        terms.append((float(mod.get("weight", default_weight)), fcts))
    return terms


def _loss_fct(name, target, pred, channel_weights):
    """One loss function on one (stream, fstep, sub-step): pred [ens, P, F], target [P, F]."""
    valid = ~torch.isnan(target)
    p = pred.mean(0)                       # ensemble mean (ens = 1: the member)
    t = torch.where(valid, target, torch.zeros_like(target))
    p = torch.where(valid, p, torch.zeros_like(p))
    d = (t - p) ** 2 if name == "mse" else (t - p).abs()
    loss_chs = d.mean(0)                   # mean over points, NaN entries counted as 0
    if channel_weights is not None:
        return (loss_chs * channel_weights).mean()
    return loss_chs.mean()


def _substeps(times, n):
    """Index sets of the loss sub-steps: one per distinct time (sorted), or all points."""
    if times is None or times.numel() != n:
        return [None]
    uniq = torch.unique(times)
    if uniq.numel() <= 1:
        return [None]
    return [torch.nonzero(times == t).flatten() for t in uniq]


def sample_loss(streams, targets, preds, target_weights, fcts, train, times=None):
    """LossPhysical for one sample (before the module weight).

    streams: stream configs; targets[si][k], preds[si][k]: the k-th forecast step from
    forecast_offset on ([P, F] and [ens, P, F]); target_weights[si]: 0 for a spoofed stream;
    times[si][k]: [P] target times or None (sub-steps, with tokenize_spacetime).
    """
    total, ctr_streams = torch.zeros(()), 0
    for si, s in enumerate(streams):
        stream_w = float(s.get("loss_weight", 1.0)) if train else 1.0
        cw = s.get("channel_weights") if train else None
        if isinstance(cw, dict):
            raise NotImplementedError("channel_weights by channel name (the dump has no channel names)")
        cw = torch.tensor(cw, dtype=torch.float32) if cw is not None else None
        loss_fsteps, ctr_fsteps = torch.zeros(()), 0
        for k, (target, pred) in enumerate(zip(targets[si], preds[si])):
            if target.shape[0] == 0 or pred.numel() == 0:
                continue
            t_k = times[si][k] if times is not None and s.get("tokenize_spacetime", False) else None
            subs = _substeps(t_k, target.shape[0])
            loss_fstep, ctr_fcts = torch.zeros(()), 0
            for name, w in fcts:
                lf, ctr_sub = torch.zeros(()), 0
                for idx in subs:
                    l_sub = (_loss_fct(name, target, pred, cw) if idx is None
                             else _loss_fct(name, target[idx], pred[:, idx], cw))
                    lf = lf + l_sub
                    ctr_sub += int(l_sub.item() > 0.0)
                lf = lf / (ctr_sub if ctr_sub > 0 else 1)
                loss_fstep = loss_fstep + w * lf * stream_w          # fstep weight 1.0
                ctr_fcts += int(lf.item() > 0.0)
            if ctr_fcts > 0:
                loss_fsteps = loss_fsteps + loss_fstep / ctr_fcts
                ctr_fsteps += 1
        spoof_w = float(target_weights[si])
        if ctr_fsteps > 0:
            total = total + spoof_w * loss_fsteps / ctr_fsteps
        ctr_streams += int(ctr_fsteps > 0 and spoof_w != 0.0)
    return total / torch.tensor(float(ctr_streams))


def compute_loss(cfg, batch, preds, train=True):
    """Σ_modules weight_m · L_m, L_m = mean over samples of sample_loss (B = 1: upstream)."""
    terms = loss_terms(cfg["training_mode_config" if train else "validation_mode_config"],
                       0.7 if train else 1.0)
    streams = cfg["streams"]
    off = int(cfg["forecast_offset"])
    fsteps = list(range(off, off + int(cfg["forecast_steps"]) + 1))
    C = 12 * 4 ** int(cfg["healpix_level"])
    # split each stream's predictions (all samples, global-cell order) into samples
    per_sample = [[[None] * len(fsteps) for _ in streams] for _ in range(batch.B)]
    for si, s in enumerate(streams):
        for k, f in enumerate(fsteps):
            p = preds[s["name"]][f]
            counts = batch.target_coords_idxs[si][f][1:].long().view(batch.B, C).sum(1).tolist()
            if p.shape[1] == 0:
                parts = [p] * batch.B
            else:
                parts = torch.split(p, counts, dim=1)
            for b in range(batch.B):
                per_sample[b][si][k] = parts[b]
    total = torch.zeros(())
    for weight, fcts in terms:
        losses = []
        for b in range(batch.B):
            targets = [[batch.data[b][si]["target_tokens"][f] for f in fsteps] for si in range(len(streams))]
            tw = [float(batch.data[b][si]["target_weight"]) for si in range(len(streams))]
            times = [[batch.data[b][si].get("target_times", {}).get(f) for f in fsteps] for si in range(len(streams))]
            losses.append(sample_loss(streams, targets, per_sample[b], tw, fcts, train, times))
        total = total + weight * torch.stack(losses).mean()
    return total
