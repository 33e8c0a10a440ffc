// FLOP count (see header). One function per section, mirroring the
// section's forward in weather_model.cpp, engines.cpp, prediction.cpp and
// embed_transformer.cpp: when a section's products change, so does this.
// The model test checks the count against the profiler's count of a real
// forward, and a hand count of a small config.
#include "wg/model/flops.h"

#include <algorithm>

#include "wg/data/tokenizer.h"
#include "wg/model/saving.h"

namespace wg {

namespace {

double linear(double rows, int64_t in, int64_t out) { return 2.0 * rows * double(in) * double(out); }

// Both products of attention (scores and values) for one segment:
// lq queries, lk keys, `inner` = heads · head width.
double attention_core(double lq, double lk, int64_t inner) { return 4.0 * lq * lk * double(inner); }

double ada_norm(double rows, int64_t dim, int64_t dim_aux) {
  return dim_aux > 0 ? linear(rows, dim_aux, 4 * dim_aux) + linear(rows, 4 * dim_aux, 2 * dim) : 0.0;
}
// Its first product, which a lean run runs again (norms.h).
double ada_norm_first(double rows, int64_t dim_aux) { return dim_aux > 0 ? linear(rows, dim_aux, 4 * dim_aux) : 0.0; }

// A piece's forward, its last product and what a lean run runs again (see PieceFlops).
struct Counted {
  double all = 0, last = 0, lean = 0;
};

Counted mlp(double rows, int64_t dim_in, int64_t dim_out, double hidden_factor, int64_t dim_aux, double aux_rows) {
  const int64_t hidden = int64_t(double(dim_in) * hidden_factor);
  const double last = linear(rows, hidden, dim_out);
  return {ada_norm(aux_rows, dim_in, dim_aux) + linear(rows, dim_in, hidden) + last, last,
          ada_norm_first(aux_rows, dim_aux)};
}

void add(ModelFlops& f, const PieceKey& key, const Counted& c) { f.add(key, c.all, c.last, c.lean); }

// Whether a core runs as the CPU kernel's joint pass where it runs again
// (attention.cpp's joint_runs): on the CPU kernel, in the layouts it takes
// (`layout`: dense, varlen and cross-attention, the adapter's query slots
// included; not block-local attention, run again under autograd).
bool joint(CoreKernel kernel, bool layout = true) { return kernel == CoreKernel::Cpu && layout; }

// What a lean attention piece runs again of its core: nothing where the
// layer keeps the core's output (lean_reruns_core, saving.h: the core's
// FLOPs against the four projections'); where it
// runs the core again, its output product (half the core) when the joint
// pass runs it (the scores are computed once for forward and backward,
// attention_core.h), else the whole core. The same joint pass runs a
// recomputed piece's core (`joint_core` of PieceFlops: its rerun leaves
// the core's forward out).
double lean_core(double core, double projections, bool joint_pass) {
  if (!lean_reruns_core(core, projections)) return 0.0;
  return joint_pass ? 0.5 * core : core;
}

// q, k, v and out projections of a self-attention of width `dim` on `rows` tokens.
double self_projections(double rows, int64_t dim) { return 4.0 * linear(rows, dim, dim); }

// Self-attention over `batch` sequences of `length`, block-local in blocks
// of `block` tokens when block > 0 (the last block shorter).
double sequence_core(double batch, int64_t length, int64_t block, int64_t dim) {
  if (block <= 0 || block >= length) return batch * attention_core(double(length), double(length), dim);
  const int64_t full = length / block, rest = length % block;
  return batch * (double(full) * attention_core(double(block), double(block), dim) +
                  attention_core(double(rest), double(rest), dim));
}

void embed(ModelFlops& f, const EmbedOptions& o, int64_t tokens, CoreKernel kernel) {
  const double n = double(tokens), rows = n * o.num_channels;
  const auto key = [&](PieceKind kind, int block = -1) { return PieceKey{"embed", o.stream, block, kind}; };
  // Lean, a lean block 0 attention makes the input's output again (its product).
  const double input = linear(rows, o.token_size, o.dim_embed);
  f.add(key(PieceKind::Input), input, 0, o.num_blocks > 0 ? input : 0.0);
  for (PieceFlops& p : f.pieces)
    if (p.key == key(PieceKind::Input)) p.lean_rerun_with_next = true;
  for (int i = 0; i < o.num_blocks; ++i) {
    const double core = n * attention_core(o.num_channels, o.num_channels, o.dim_embed);
    const double projections = self_projections(rows, o.dim_embed);
    f.add(key(PieceKind::Attention, i), projections + core, linear(rows, o.dim_embed, o.dim_embed),
          lean_core(core, projections, joint(kernel)), joint(kernel) ? core : 0.0);
    add(f, key(PieceKind::Mlp, i), mlp(rows, o.dim_embed, o.dim_embed, 2.0, 0, 0));
  }
  const EmbedReadout r = embed_readout(o);
  if (o.unembed_mode == "block")
    f.add(key(PieceKind::Readout), linear(rows, o.dim_embed, r.per_channel));
  else
    f.add(key(PieceKind::Readout),
          linear(n, int64_t(o.num_channels) * o.dim_embed, int64_t(o.num_tokens) * o.dim_out - r.centroid_width));
  if (o.embed_size_centroids > 0) f.outside_pieces += linear(n, kCentroidWidth, r.centroid_width);
}

void local(ModelFlops& f, const EngineOptions& o, const FlopShape& s, CoreKernel kernel) {
  double core = 0;
  for (const int64_t l : s.source_cell_lens) core += attention_core(double(l), double(l), o.dim);
  const double m = double(s.num_tokens);
  for (int64_t i = 0; i < o.num_blocks; ++i) {
    f.add(PieceKey::in_block(o.section, "", int(i), PieceKind::Attention), self_projections(m, o.dim) + core,
          linear(m, o.dim, o.dim), lean_core(core, self_projections(m, o.dim), joint(kernel)),
          joint(kernel) ? core : 0.0);
    add(f, PieceKey::in_block(o.section, "", int(i), PieceKind::Mlp), mlp(m, o.dim, o.dim, o.mlp_hidden_factor, 0, 0));
  }
}

void adapter(ModelFlops& f, const AdapterOptions& o, const FlopShape& s, CoreKernel kernel) {
  double cells = 0, core = 0;
  const int64_t inner = o.num_heads * o.dim_head;
  for (const int64_t l : s.source_cell_lens)
    if (l > 0) {
      cells += 1;
      core += double(o.num_queries) * attention_core(1, double(l), inner);
    }
  if (cells == 0) return;
  const double queries = cells * double(o.num_queries);
  const double out = linear(queries, inner, o.dim_q);
  const double projections = linear(queries, o.dim_q, inner)                        // one projection per slot
                             + 2.0 * linear(double(s.num_tokens), o.dim_kv, inner) // keys, values of every token
                             + out;
  const double cross = projections + core, lean = lean_core(core, projections, joint(kernel)),
               joint_core = joint(kernel) ? core : 0.0;
  f.add(PieceKey::in_block("ae_adapter", "", 0, PieceKind::CrossAttention), cross, out, lean, joint_core);
  add(f, PieceKey::in_block("ae_adapter", "", 0, PieceKind::Mlp), mlp(queries, o.dim_q, o.dim_q, 2.0, 0, 0));
  f.add(PieceKey::in_block("ae_adapter", "", 1, PieceKind::CrossAttention), cross, out, lean, joint_core);
}

// An engine over `batch` sequences of `length` tokens per call (one call
// per entry), its norms' aux on aux_rows rows.
void engine(ModelFlops& f, const EngineOptions& o, const std::vector<std::pair<double, int64_t>>& sequences,
            double aux_rows, CoreKernel kernel) {
  double rows = 0;
  for (const auto& [batch, length] : sequences) rows += batch * double(length);
  for (int64_t i = 0; i < o.num_blocks; ++i) {
    const bool joint_pass = joint(kernel, attention_block(o, i) == 0);  // block-local: under autograd
    // Each entry of `sequences` is one call of the layer (the aggregation
    // engine's samples, one at a time), and a lean layer decides per call.
    double core = 0, lean = 0;
    for (const auto& [batch, length] : sequences) {
      const double c = sequence_core(batch, length, attention_block(o, i), o.dim);
      core += c;
      lean += lean_core(c, self_projections(batch * double(length), o.dim), joint_pass);
    }
    f.add(PieceKey::in_block(o.section, "", int(i), PieceKind::Attention),
          ada_norm(aux_rows, o.dim, o.dim_aux) + self_projections(rows, o.dim) + core, linear(rows, o.dim, o.dim),
          lean + ada_norm_first(aux_rows, o.dim_aux), joint_pass ? core : 0.0);
    add(f, PieceKey::in_block(o.section, "", int(i), PieceKind::Mlp),
        mlp(rows, o.dim, o.dim, o.mlp_hidden_factor, o.dim_aux, aux_rows));
  }
}

void decoder(ModelFlops& f, const DecoderOptions& o, const std::vector<int64_t>& lens, const FlopShape& s,
             int64_t num_queries, CoreKernel kernel) {
  double p = 0, cross_core = 0, self_core = 0;
  const int64_t dh = o.dim_head > 0 ? o.dim_head : o.dim_embed / o.num_heads, inner = o.num_heads * dh;
  for (const int64_t l : lens) {
    p += double(l);
    cross_core += attention_core(double(l), double(9 * num_queries), inner);
    self_core += attention_core(double(l), double(l), o.dim_embed);
  }
  if (p == 0) return;
  // keys and values: the latent's tokens projected once each, then gathered (9 cells read each)
  const double latent_tokens = double(s.num_samples * s.num_cells * num_queries);
  f.add(PieceKey::io("pred", o.stream, PieceKind::Input), linear(p, o.dim_coords, o.dim_embed));
  const double cross_out = linear(p, inner, o.dim_embed);
  const double cross_projections =
      linear(p, o.dim_embed, inner) + 2.0 * linear(latent_tokens, o.dim_latent, inner) + cross_out;
  const double cross_rerun = lean_core(cross_core, cross_projections, joint(kernel));
  for (int64_t l = 0; l < o.num_layers; ++l) {
    f.add(PieceKey::in_block("pred", o.stream, int(l), PieceKind::CrossAttention),
          ada_norm(p, o.dim_embed, o.dim_coords) + cross_projections + cross_core, cross_out,
          cross_rerun + ada_norm_first(p, o.dim_coords), joint(kernel) ? cross_core : 0.0);
    if (o.self_attention)
      f.add(PieceKey::in_block("pred", o.stream, int(l), PieceKind::Attention),
            ada_norm(p, o.dim_embed, o.dim_coords) + self_projections(p, o.dim_embed) + self_core,
            linear(p, o.dim_embed, o.dim_embed),
            lean_core(self_core, self_projections(p, o.dim_embed), joint(kernel)) +
                ada_norm_first(p, o.dim_coords),
            joint(kernel) ? self_core : 0.0);
    add(f, PieceKey::in_block("pred", o.stream, int(l), PieceKind::Mlp),
        mlp(p, o.dim_embed, o.dim_embed, o.mlp_hidden_factor, o.mlp_adaln ? o.dim_coords : 0, p));
  }
  double head = 0;
  if (o.head_layers == 1) {
    head = linear(p, o.dim_embed, o.num_target_channels);
  } else if (o.head_layers > 1) {
    const int64_t internal = 2 * o.dim_embed;
    head = linear(p, o.dim_embed, internal) + double(o.head_layers - 2) * linear(p, internal, internal) +
           linear(p, internal, o.num_target_channels);
  }
  f.add(PieceKey::io("pred", o.stream, PieceKind::Head), double(o.ens_size) * head);
}

}  // namespace

void ModelFlops::add(const PieceKey& key, double flops, double last_product, double lean_rerun, double joint_core) {
  for (PieceFlops& p : pieces)
    if (p.key == key) {
      p.forward += flops;
      p.last_product += last_product;
      p.lean_rerun += lean_rerun;
      p.joint_core += joint_core;
      return;
    }
  pieces.push_back({key, flops, last_product, lean_rerun, joint_core});
}

double ModelFlops::forward() const {
  double sum = outside_pieces;
  for (const PieceFlops& p : pieces) sum += p.forward;
  return sum;
}

double ModelFlops::recomputed(const RecomputePlan& plan) const {
  double sum = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PieceFlops& p = pieces[i];
    switch (plan.mode(p.key)) {
      case PieceMode::Recompute: sum += p.rerun(); break;
      case PieceMode::Lean:
        if (!p.lean_rerun_with_next || (i + 1 < pieces.size() && plan.mode(pieces[i + 1].key) == PieceMode::Lean))
          sum += p.lean_rerun;
        break;
      case PieceMode::Keep: break;
    }
  }
  return sum;
}

ModelFlops model_flops(const ModelOptions& o, const FlopShape& s, CoreKernel kernel) {
  ModelFlops f;
  for (const FlopShape::Stream& stream : s.streams)
    for (const EmbedOptions& e : o.embeds)
      if (e.stream == stream.name && stream.source_tokens > 0) embed(f, e, stream.source_tokens, kernel);
  local(f, o.local, s, kernel);
  adapter(f, o.adapter, s, kernel);
  std::vector<int64_t> per_sample(size_t(s.num_samples), 0);
  for (size_t g = 0; g < s.source_cell_lens.size(); ++g)
    if (s.source_cell_lens[g] > 0) ++per_sample[g / size_t(s.num_cells)];
  std::vector<std::pair<double, int64_t>> aggregation;
  for (const int64_t n : per_sample)
    if (n > 0) aggregation.emplace_back(double(o.num_queries), n);  // the query slot is the batch
  engine(f, o.aggregation, aggregation, 0, kernel);
  const std::vector<std::pair<double, int64_t>> global = {{double(s.num_samples), s.num_cells * o.num_queries}};
  engine(f, o.global, global, 0, kernel);
  const int64_t first = o.forecast_offset, last = s.num_target_steps - 1;
  for (int64_t step = first; step <= last; ++step) {
    for (size_t d = 0; d < o.decoders.size() && d < s.streams.size(); ++d)
      if (size_t(step) < s.streams[d].target_lens.size())
        decoder(f, o.decoders[d], s.streams[d].target_lens[size_t(step)], s, o.num_queries, kernel);
    if (step < last) engine(f, o.forecast, global, 1, kernel);
  }
  return f;
}

}  // namespace wg
