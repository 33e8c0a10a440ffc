// The prediction section (see header). Dropout in the decoder's blocks is
// pred_dropout_rate, 0.1 by default: upstream hard-codes 0.1.
#include "wg/model/prediction.h"

#include <algorithm>
#include <cctype>

namespace wg {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

torch::nn::AnyModule activation(const std::string& name) {
  const std::string n = lower(name);
  if (n == "identity") return torch::nn::AnyModule(torch::nn::Identity());
  if (n == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  if (n == "sigmoid") return torch::nn::AnyModule(torch::nn::Sigmoid());
  if (n == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  if (n == "relu") return torch::nn::AnyModule(torch::nn::ReLU());
  if (n == "leakyrelu") return torch::nn::AnyModule(torch::nn::LeakyReLU());
  if (n == "elu") return torch::nn::AnyModule(torch::nn::ELU());
  if (n == "selu") return torch::nn::AnyModule(torch::nn::SELU());
  if (n == "softplus") return torch::nn::AnyModule(torch::nn::Softplus());
  if (n == "silu" || n == "swish") return torch::nn::AnyModule(torch::nn::SiLU());
  if (n == "softmax") return torch::nn::AnyModule(torch::nn::Softmax(-1));
  if (n == "logsoftmax") return torch::nn::AnyModule(torch::nn::LogSoftmax(-1));
  TORCH_CHECK(false, "prediction head: final_activation '", name, "' is not supported");
}
}  // namespace

bool known_final_activation(const std::string& name) {
  static const char* const names[] = {"identity", "tanh", "sigmoid", "gelu", "relu", "leakyrelu", "elu",
                                      "selu", "softplus", "silu", "swish", "softmax", "logsoftmax"};
  return std::find(std::begin(names), std::end(names), lower(name)) != std::end(names);
}

CoordEmbeddingImpl::CoordEmbeddingImpl(int64_t dim_in, int64_t dim_out) {
  linear = register_module("linear", torch::nn::Linear(torch::nn::LinearOptions(dim_in, dim_out).bias(false)));
}

TargetTokenEngineImpl::TargetTokenEngineImpl(const DecoderOptions& o) : o_(o) {
  auto tte = register_module("tte", torch::nn::ModuleList());
  for (int64_t l = 0; l < o.num_layers; ++l) {
    AttentionOptions a;
    a.dim = o.dim_embed;
    a.dim_kv = o.dim_latent;
    a.num_heads = o.num_heads;
    a.dim_head = o.dim_head;
    a.dropout = o.dropout;
    a.norm_eps = o.norm_eps;
    a.dim_aux = o.dim_coords;
    cross_.emplace_back(a);
    tte->push_back(cross_.back());
    if (o.self_attention) {
      AttentionOptions s = a;
      s.dim_kv = 0;
      s.dim_head = 0;
      self_.emplace_back(s);
      tte->push_back(self_.back());
    }
    MlpOptions m;
    m.dim_in = o.dim_embed;
    m.dim_out = o.dim_embed;  // obs_value read-out: every layer E wide, with residual
    m.hidden_factor = o.mlp_hidden_factor;
    m.dropout = o.dropout;
    m.norm_eps = o.mlp_norm_eps;
    m.dim_aux = o.mlp_adaln ? o.dim_coords : 0;
    mlp_.emplace_back(m);
    tte->push_back(mlp_.back());
  }
}

std::vector<PieceKey> TargetTokenEngineImpl::block_keys() const {
  std::vector<PieceKey> keys;
  for (int l = 0; l < int(cross_.size()); ++l) {
    keys.push_back(PieceKey::in_block("pred", o_.stream, l, PieceKind::CrossAttention));
    if (o_.self_attention) keys.push_back(PieceKey::in_block("pred", o_.stream, l, PieceKind::Attention));
    keys.push_back(PieceKey::in_block("pred", o_.stream, l, PieceKind::Mlp));
  }
  return keys;
}

void TargetTokenEngineImpl::add_pieces(std::vector<Piece>& pieces, const std::vector<PieceMode>& modes, size_t first,
                                       const torch::Tensor& latent, const torch::Tensor& kv_rows,
                                       const torch::Tensor& coords, const VarlenSegments& to_latent,
                                       const VarlenSegments& within_cells) {
  const std::vector<PieceKey> keys = block_keys();
  size_t k = 0;
  const auto add = [&](PieceBody fn, std::vector<torch::Tensor> params) {
    pieces.push_back({keys[k], std::move(fn), std::move(params), modes[first + k]});
    ++k;
  };
  for (size_t l = 0; l < cross_.size(); ++l) {
    auto cross = cross_[l];
    add([cross, latent, kv_rows, coords, to_latent](const torch::Tensor& e, Saving saving) mutable {
          return cross->forward(e, latent, to_latent, coords, saving, kv_rows);
        },
        with_params(*cross, {latent}));
    if (o_.self_attention) {
      auto self = self_[l];
      add([self, coords, within_cells](const torch::Tensor& e, Saving saving) mutable {
            return self->forward_varlen(e, within_cells, coords, saving);
          },
          self->parameters());
    }
    auto mlp = mlp_[l];
    add([mlp, coords](const torch::Tensor& e, Saving saving) mutable { return mlp->forward(e, coords, saving); },
        mlp->parameters());
  }
}

EnsPredictionHeadImpl::EnsPredictionHeadImpl(const DecoderOptions& o) {
  auto heads = register_module("pred_heads", torch::nn::ModuleList());
  const int64_t internal = 2 * o.dim_embed, layers = o.head_layers;
  for (int64_t m = 0; m < o.ens_size; ++m) {
    auto member = torch::nn::ModuleList();
    std::vector<torch::nn::AnyModule> run;
    const auto add = [&](torch::nn::AnyModule mod) {
      member->push_back(mod.ptr());
      run.push_back(std::move(mod));
    };
    add(torch::nn::AnyModule(torch::nn::Linear(o.dim_embed, layers == 1 ? o.num_target_channels : internal)));
    for (int64_t i = 0; i < layers - 1; ++i) {
      add(torch::nn::AnyModule(torch::nn::GELU()));
      add(torch::nn::AnyModule(torch::nn::Linear(internal, i == layers - 2 ? o.num_target_channels : internal)));
    }
    if (layers >= 1) add(activation(o.final_activation));
    heads->push_back(member);
    members_.push_back(std::move(run));
  }
}

torch::Tensor EnsPredictionHeadImpl::forward(const torch::Tensor& e) {
  std::vector<torch::Tensor> preds;
  for (auto& member : members_) {
    torch::Tensor x = e;
    for (auto& block : member) x = block.forward(x);
    preds.push_back(x);
  }
  return torch::stack(preds, 0);
}

}  // namespace wg
