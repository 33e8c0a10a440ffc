// The assimilation engines (see header).
#include "wg/model/engines.h"

namespace wg {

namespace {
AttentionOptions self_attention(const EngineOptions& o, int64_t block) {
  AttentionOptions a;
  a.dim = o.dim;
  a.num_heads = o.num_heads;
  a.dropout = o.dropout;
  a.norm_eps = o.norm_eps;
  a.qk_norm = o.qk_norm;
  a.dim_aux = o.dim_aux;
  a.block = block;
  return a;
}

MlpOptions mlp_options(const EngineOptions& o);

// Registers o.num_blocks (attention, MLP) pairs under o.blocks_name, the
// attention of block i local to blocks of block_size(i) cells (0: dense),
// and returns their piece keys.
template <typename BlockSize>
std::vector<PieceKey> add_blocks(torch::nn::Module& m, const EngineOptions& o, BlockSize block_size,
                                 std::vector<SelfAttention>& attention, std::vector<Mlp>& mlp) {
  auto blocks = m.register_module(o.blocks_name, torch::nn::ModuleList());
  std::vector<PieceKey> keys;
  for (int64_t i = 0; i < o.num_blocks; ++i) {
    attention.emplace_back(self_attention(o, block_size(i)));
    mlp.emplace_back(mlp_options(o));
    blocks->push_back(attention.back());
    blocks->push_back(mlp.back());
    keys.push_back(PieceKey::in_block(o.section, "", int(i), PieceKind::Attention));
    keys.push_back(PieceKey::in_block(o.section, "", int(i), PieceKind::Mlp));
  }
  return keys;
}

MlpOptions mlp_options(const EngineOptions& o) {
  MlpOptions m;
  m.dim_in = o.dim;
  m.hidden_factor = o.mlp_hidden_factor;
  m.dropout = o.dropout;
  m.norm_eps = o.mlp_norm_eps;
  m.dim_aux = o.dim_aux;
  return m;
}
}  // namespace

// ---- local assimilation -----------------------------------------------------

LocalEngineImpl::LocalEngineImpl(const EngineOptions& o) {
  set_keys(add_blocks(*this, o, [](int64_t) { return int64_t(0); }, attention_, mlp_));
}

torch::Tensor LocalEngineImpl::forward(const torch::Tensor& tokens, const VarlenSegments& cells) {
  std::vector<Piece> pieces;
  for (size_t i = 0; i < attention_.size(); ++i) {
    auto attn = attention_[i];
    auto mlp = mlp_[i];
    pieces.push_back({keys_[2 * i], [attn, cells](const torch::Tensor& x, Saving saving) mutable {
                        return attn->forward_varlen(x, cells, {}, saving);
                      },
                      attn->parameters(), modes_[2 * i]});
    pieces.push_back({keys_[2 * i + 1], [mlp](const torch::Tensor& x, Saving saving) mutable { return mlp->forward(x, {}, saving); },
                      mlp->parameters(), modes_[2 * i + 1]});
  }
  return run_pieces(pieces, tokens, observer_);
}

// ---- local-to-global adapter -------------------------------------------------

AdapterImpl::AdapterImpl(const AdapterOptions& o) {
  AttentionOptions a;
  a.dim = o.dim_q;
  a.dim_kv = o.dim_kv;
  a.num_heads = o.num_heads;
  a.dim_head = o.dim_head;
  a.sliced_q = true;
  a.num_slices_q = o.num_queries;
  a.dropout = o.dropout;
  a.norm_eps = o.norm_eps;
  a.qk_norm = o.qk_norm;
  a.with_residual = o.with_residual;
  MlpOptions m;
  m.dim_in = o.dim_q;
  m.dropout = o.dropout;
  m.norm_eps = o.mlp_norm_eps;
  auto blocks = register_module("ae_adapter", torch::nn::ModuleList());
  cross_.emplace_back(a);
  mlp_ = Mlp(m);
  cross_.emplace_back(a);
  blocks->push_back(cross_[0]);
  blocks->push_back(mlp_);
  blocks->push_back(cross_[1]);
  set_keys({PieceKey::in_block("ae_adapter", "", 0, PieceKind::CrossAttention),
            PieceKey::in_block("ae_adapter", "", 0, PieceKind::Mlp),
            PieceKey::in_block("ae_adapter", "", 1, PieceKind::CrossAttention)});
}

torch::Tensor AdapterImpl::forward(const torch::Tensor& queries, const torch::Tensor& tokens,
                                   const VarlenSegments& cells) {
  const auto cross = [&cells, &tokens](CrossAttention c) {
    return [c, cells, tokens](const torch::Tensor& q, Saving saving) mutable { return c->forward(q, tokens, cells, {}, saving); };
  };
  auto mlp = mlp_;
  const std::vector<Piece> pieces = {
      {keys_[0], cross(cross_[0]), with_params(*cross_[0], {tokens}), modes_[0]},
      {keys_[1], [mlp](const torch::Tensor& q, Saving saving) mutable { return mlp->forward(q, {}, saving); },
       mlp_->parameters(), modes_[1]},
      {keys_[2], cross(cross_[1]), with_params(*cross_[1], {tokens}), modes_[2]},
  };
  return run_pieces(pieces, queries, observer_);
}

// ---- dense / block-local engines ---------------------------------------------

TransformerEngineImpl::TransformerEngineImpl(const EngineOptions& o) {
  const auto block_size = [&o](int64_t i) { return attention_block(o, i); };
  set_keys(add_blocks(*this, o, block_size, attention_, mlp_));
}

torch::Tensor TransformerEngineImpl::forward(const torch::Tensor& x, const torch::Tensor& aux) {
  std::vector<Piece> pieces;
  for (size_t i = 0; i < attention_.size(); ++i) {
    auto attn = attention_[i];
    auto mlp = mlp_[i];
    pieces.push_back({keys_[2 * i], [attn, aux](const torch::Tensor& t, Saving saving) mutable { return attn->forward(t, aux, saving); },
                      attn->parameters(), modes_[2 * i]});
    pieces.push_back({keys_[2 * i + 1], [mlp, aux](const torch::Tensor& t, Saving saving) mutable { return mlp->forward(t, aux, saving); },
                      mlp->parameters(), modes_[2 * i + 1]});
  }
  return run_pieces(pieces, x, observer_);
}

}  // namespace wg
