"""The twin's recomputation pieces: the forward cut into the same pieces as the C++
model (include/wg/plan/piece_key.h, model_pieces in src/plan/recompute_plan.cpp),
keyed by the same strings ("embed.ERA5/input", "ae_adapter/block0.cross",
"pred.ERA5/head", ...), and the keys a mode recomputes per section (resolve_plan,
as the C++ plan). wg_model.WGModel runs them (set_recompute, set_recompute_mode).
"""

# The recomputable sections in forward order (include/wg/config/recompute_sections.h).
SECTIONS = ("embed", "ae_local", "ae_adapter", "ae_aggregation", "ae_global", "forecast", "pred")
MODES = ("none", "full", "selective", "every_n")
ATTENTION_KINDS = ("attn", "cross")


class PieceKey:
    """One recomputable piece: section, stream ('' unless per stream), block (-1: outside blocks), kind."""

    __slots__ = ("section", "stream", "block", "kind")

    def __init__(self, section, stream, block, kind):
        self.section, self.stream, self.block, self.kind = section, stream, int(block), kind

    def __str__(self):
        head = f"{self.section}.{self.stream}" if self.stream else self.section
        return f"{head}/" + (f"block{self.block}.{self.kind}" if self.block >= 0 else self.kind)

    __repr__ = __str__


def _is_diagnostic(s):
    return bool(s.get("diagnostic")) or int(s["sources_size"]) == 0


def model_pieces(cfg):
    """The model's pieces in forward order, as the C++ model_pieces lists them."""
    out = []
    blocks = lambda sec, n: [PieceKey(sec, "", b, k) for b in range(int(n)) for k in ("attn", "mlp")]  # noqa: E731
    for s in cfg["streams"]:
        if _is_diagnostic(s):
            continue
        out.append(PieceKey("embed", s["name"], -1, "input"))
        out += [PieceKey("embed", s["name"], b, k) for b in range(int(s["embed"]["num_blocks"]))
                for k in ("attn", "mlp")]
        out.append(PieceKey("embed", s["name"], -1, "readout"))
    out += blocks("ae_local", cfg["ae_local_num_blocks"])
    out += [PieceKey("ae_adapter", "", 0, "cross"), PieceKey("ae_adapter", "", 0, "mlp"),
            PieceKey("ae_adapter", "", 1, "cross")]
    out += blocks("ae_aggregation", cfg["ae_aggregation_num_blocks"])
    out += blocks("ae_global", cfg["ae_global_num_blocks"])
    forecasting = cfg["forecast_policy"] is not None and int(cfg["fe_num_blocks"]) > 0
    out += blocks("forecast", cfg["fe_num_blocks"] if forecasting else 0)
    for s in cfg["streams"]:
        out.append(PieceKey("pred", s["name"], -1, "input"))
        for l in range(int(s["target_readout"]["num_layers"])):
            out.append(PieceKey("pred", s["name"], l, "cross"))
            if cfg["pred_self_attention"]:
                out.append(PieceKey("pred", s["name"], l, "attn"))
            out.append(PieceKey("pred", s["name"], l, "mlp"))
        out.append(PieceKey("pred", s["name"], -1, "head"))
    return out


def resolve_plan(pieces, sections):
    """The keys (strings) to recompute. `sections`: a mode name for every section, or
    {section: mode or (mode, every_n)} (absent sections: none). As the C++ resolve_plan:
      none nothing; full every piece; selective the attention pieces (attn, cross);
      every_n blocks 0, n, 2n, ... (all their pieces). A section without block pieces
      counts as one block, block 0; pieces outside blocks (embed input and read-out,
      pred input and head) are recomputed by full only.
    """
    if isinstance(sections, str):
        sections = {sec: sections for sec in SECTIONS}
    blocks = {}
    for p in pieces:
        blocks[p.section] = max(blocks.get(p.section, 0), p.block + 1)
    keys = set()
    for p in pieces:
        spec = sections.get(p.section, "none")
        mode, n = (spec, 1) if isinstance(spec, str) else (spec[0], int(spec[1]))
        if mode not in MODES:
            raise ValueError(f"unknown recomputation mode '{mode}' (expected one of {', '.join(MODES)})")
        if mode == "every_n" and n < 1:
            raise ValueError(f"{p.section}: every_n must be >= 1")
        block = p.block if p.block >= 0 else (0 if blocks[p.section] == 0 else -1)
        on = (mode == "full" or (mode == "selective" and p.kind in ATTENTION_KINDS)
              or (mode == "every_n" and block >= 0 and block % n == 0))
        if on:
            keys.add(str(p))
    return keys
