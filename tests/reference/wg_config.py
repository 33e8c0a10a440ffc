"""Configuration of the WeatherGenerator twin: default model keys and derived sizes.

Owns: the default values of every model key the twin reads (wg-model.md §1.1,
§1.2), merging a run's `model` JSON (docs/step-dump.md) over them, the
per-stream defaults, and the derived sizes of §1.3 (dims_embed, unembed
widths). Values that the spec does not give are not invented here: they must
come from the run's configuration (see REQUIRED_WHEN_FORECASTING).
"""
import copy

# wg-model.md §1.1 (config/default_config.yml upstream).
DEFAULTS = {
    "embed_orientation": "channels",
    "embed_size_centroids": 0,
    "embed_unembed_mode": "block",
    "embed_dropout_rate": 0.1,
    "target_cell_local_prediction": True,
    "ae_local_dim_embed": 1024,
    "ae_local_num_blocks": 2,
    "ae_local_num_heads": 16,
    "ae_local_dropout_rate": 0.1,
    "ae_local_with_qk_lnorm": True,
    "ae_local_num_queries": 1,
    "ae_local_queries_per_cell": False,
    "ae_adapter_num_heads": 16,
    "ae_adapter_embed": 128,
    "ae_adapter_with_qk_lnorm": True,
    "ae_adapter_with_residual": True,
    "ae_adapter_dropout_rate": 0.1,
    "ae_global_dim_embed": 2048,
    "ae_global_num_blocks": 8,
    "ae_global_num_heads": 32,
    "ae_global_dropout_rate": 0.1,
    "ae_global_with_qk_lnorm": True,
    "ae_global_att_dense_rate": 1.0,
    "ae_global_block_factor": 64,
    "ae_global_mlp_hidden_factor": 2,
    "ae_aggregation_num_blocks": 2,
    "ae_aggregation_num_heads": 32,
    "ae_aggregation_dropout_rate": 0.1,
    "ae_aggregation_with_qk_lnorm": True,
    "ae_aggregation_att_dense_rate": 1.0,
    "ae_aggregation_block_factor": 64,
    "ae_aggregation_mlp_hidden_factor": 2,
    "decoder_type": "PerceiverIOCoordConditioning",
    "pred_adapter_kv": False,
    "pred_self_attention": True,
    "pred_dyadic_dims": False,
    "pred_mlp_adaln": True,
    "forecast_offset": 0,
    "forecast_steps": 0,
    "forecast_policy": None,
    "fe_num_blocks": 0,
    "healpix_level": 5,
    "norm_type": "LayerNorm",
    "norm_eps": 1e-4,
    "mlp_norm_eps": 1e-5,
    "latent_noise_kl_weight": 0.0,
    "impute_latent_noise_std": 0.0,
    "training_mode": "masking",
    "training_mode_config": {"losses": {"LossPhysical": {
        "weight": 0.7, "loss_fcts": [["mse", 0.8], ["mae", 0.2]]}}},
    "validation_mode_config": {"losses": {"LossPhysical": {
        "weight": 1.0, "loss_fcts": [["mse", 1.0]]}}},
}

# The spec (§4.8) names these keys but gives no default values: a forecasting
# configuration must set them; the twin refuses to guess.
REQUIRED_WHEN_FORECASTING = ("fe_num_heads", "fe_dropout_rate", "fe_with_qk_lnorm",
                             "forecast_att_dense_rate")

# §1.2 / §6.5 per-stream defaults (keys absent from a stream entry).
STREAM_DEFAULTS = {
    "token_size": 8,
    "embed": {"net": "transformer", "num_tokens": 1, "num_heads": 8, "dim_embed": 256, "num_blocks": 2},
    "embed_target_coords": {"net": "linear", "dim_embed": 256},
    "target_readout": {"type": "obs_value", "num_layers": 2, "num_heads": 4, "dim_head_proj": None,
                       "mlp_hidden_factor": 2, "softcap": 0.0},
    "pred_head": {"ens_size": 1, "num_layers": 1, "final_activation": "Identity"},
    "loss_weight": 1.0,
    "channel_weights": None,
    "diagnostic": False,
}


def era5_stream():
    """The ERA5 stream of §1.2 (79 source features, 72 targets, 105 coordinates)."""
    return {"name": "ERA5", "token_size": 8, "sources_size": 79, "targets_num_channels": 72,
            "targets_coords_size": 105}


def _merge(base, over):
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def stream_config(entry):
    """One stream entry with §1.2 defaults filled in (nested dicts merged key by key)."""
    s = _merge(STREAM_DEFAULTS, entry)
    for key in ("name", "sources_size", "targets_num_channels", "targets_coords_size"):
        if key not in s:
            raise ValueError(f"stream entry lacks '{key}': {entry}")
    return s


def model_config(over=None):
    """DEFAULTS with `over` laid on top; `streams` normalised with stream_config()."""
    cfg = _merge(DEFAULTS, {k: v for k, v in (over or {}).items() if k != "streams"})
    streams = (over or {}).get("streams")
    if streams is None:
        streams = [era5_stream()]
    cfg["streams"] = [stream_config(s) for s in streams]
    names = [s["name"] for s in cfg["streams"]]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate stream names {names}")
    return cfg


def num_cells(cfg):
    return 12 * 4 ** int(cfg["healpix_level"])


def dense_every(rate):
    """int(1/rate) as upstream (§13.24: non-reciprocal rates truncate)."""
    return int(1.0 / float(rate))


def dims_embed(cfg, s):
    """Prediction widths of stream s (§1.3, §12 `target_readout.type = token`)."""
    tr = s["target_readout"]
    e0 = int(s["embed_target_coords"]["dim_embed"])
    n = int(tr["num_layers"])
    if tr["type"] == "obs_value":
        return [e0] * (n + 1)
    # Spec §12: linspace(256, max(256, 8*F_tgt), L+1) as int32. Open point: the
    # spec writes 256; this twin reads it as the coordinate embedding width.
    hi = max(e0, 8 * int(s["targets_num_channels"]))
    return [int(e0 + (hi - e0) * i / n) for i in range(n + 1)]


def unembed_layout(cfg, s):
    """(rem, per-channel width, local embed_size_centroids') of the block read-out (§4.3)."""
    num_tokens = int(s["embed"]["num_tokens"])
    dout = int(cfg["ae_local_dim_embed"])
    esc = int(cfg["embed_size_centroids"])
    ch = int(s["sources_size"])
    rem = (num_tokens * dout - esc) % ch
    esc_local = esc + rem
    width = (num_tokens * dout - esc_local) // ch
    return rem, width, esc_local


def check_supported(cfg):
    """Raises NotImplementedError for settings the spec marks as broken upstream or leaves open."""
    bad = []
    if cfg["embed_orientation"] != "channels":
        bad.append("embed_orientation != channels (columns mode is not specified in enough detail)")
    if cfg["norm_type"] != "LayerNorm":
        bad.append("norm_type RMSNorm (§12 does not give the state_dict order of the new weights)")
    if cfg["decoder_type"] != "PerceiverIOCoordConditioning":
        bad.append("decoder_type other than PerceiverIOCoordConditioning (not runnable upstream, §13.2)")
    if cfg["pred_adapter_kv"]:
        bad.append("pred_adapter_kv (TypeError upstream, §13.13)")
    if cfg["ae_local_queries_per_cell"]:
        bad.append("ae_local_queries_per_cell (TypeError upstream, errata 3)")
    if float(cfg["latent_noise_kl_weight"]) > 0:
        bad.append("latent_noise_kl_weight > 0 (LatentInterpolator not specified)")
    if not cfg["target_cell_local_prediction"]:
        bad.append("target_cell_local_prediction False (inconsistent upstream, §13.25)")
    if cfg["forecast_policy"] is not None and int(cfg["fe_num_blocks"]) > 0:
        missing = [k for k in REQUIRED_WHEN_FORECASTING if k not in cfg]
        if missing:
            bad.append(f"forecast engine keys without a default in the spec: {missing}")
    for s in cfg["streams"]:
        if s["embed"]["net"] != "transformer" and not s.get("diagnostic"):
            bad.append(f"stream {s['name']}: embed.net {s['embed']['net']} (crashes upstream, errata 2)")
        if int(s["embed"]["num_tokens"]) != 1:
            bad.append(f"stream {s['name']}: embed.num_tokens != 1 (scatter indices are per token)")
        if s["embed_target_coords"]["net"] != "linear":
            bad.append(f"stream {s['name']}: embed_target_coords.net mlp (TypeError upstream, §13.13)")
    if bad:
        raise NotImplementedError("unsupported configuration: " + "; ".join(bad))

