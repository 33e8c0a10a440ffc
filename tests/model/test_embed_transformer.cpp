// The embed transformer's shapes and parameter names (as WeatherGenerator
// spells them), read-out widths and positional encoding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "wg/model/embed_transformer.h"

namespace wg {
namespace {

EmbedOptions options(int C, int dim_out, int centroids, const std::string& mode) {
  EmbedOptions o;
  o.num_tokens = 2;
  o.token_size = 4;
  o.num_channels = C;
  o.dim_embed = 16;
  o.dim_out = dim_out;
  o.num_blocks = 2;
  o.num_heads = 4;
  o.dropout_rate = 0.0;
  o.embed_size_centroids = centroids;
  o.unembed_mode = mode;
  return o;
}

std::set<std::string> names(torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& p : m.named_parameters()) out.insert(p.key());
  return out;
}

TEST(EmbedTransformer, BlockReadoutNamesAndShapes) {
  StreamEmbedTransformer embed(options(3, 16, 0, "block"));
  const auto n = names(*embed);
  for (const char* k : {"embed.weight", "embed.bias", "layers.0.proj_heads_q.weight", "layers.0.proj_heads_k.weight",
                        "layers.0.proj_heads_v.weight", "layers.0.proj_out.weight", "layers.1.layers.0.weight",
                        "layers.1.layers.0.bias", "layers.1.layers.1.weight", "layers.1.layers.1.bias",
                        "layers.1.layers.4.weight", "layers.1.layers.4.bias", "layers.2.proj_out.weight",
                        "layers.3.layers.4.bias", "unembed.0.weight", "unembed.2.bias", "ln_final.0.weight",
                        "ln_final.2.bias"})
    EXPECT_TRUE(n.count(k)) << k;
  EXPECT_TRUE(n.count("embed_centroids.weight"));  // always there, dead when embed_size_centroids is 0
  for (const auto& p : embed->named_parameters())
    if (p.key() == "embed_centroids.weight") EXPECT_EQ(p.value().sizes(), torch::IntArrayRef({2, 5}));
  EXPECT_FALSE(n.count("layers.0.proj_heads_q.bias"));  // bias-free
  // 2*16 = 32 outputs over 3 channels: 32 % 3 = 2 go to the (padded) rest
  EXPECT_EQ(embed->readout_width(), 10);
  EXPECT_EQ(embed->centroid_width(), 2);
  torch::Tensor y = embed->forward(torch::randn({5, 4, 3}));
  EXPECT_EQ(y.sizes(), torch::IntArrayRef({5, 2, 16}));
  // the padded tail is exactly zero (eval: no final dropout)
  embed->eval();
  y = embed->forward(torch::randn({5, 4, 3}));
  EXPECT_EQ(y.reshape({5, 32}).slice(1, 30).abs().max().item<float>(), 0.0f);
}

TEST(EmbedTransformer, CentroidsFillTheRemainder) {
  StreamEmbedTransformer embed(options(3, 16, 4, "block"));
  // e = 4 + (32 - 4) % 3 = 5, d_c = 27 / 3 = 9
  EXPECT_EQ(embed->centroid_width(), 5);
  EXPECT_EQ(embed->readout_width(), 9);
  EXPECT_TRUE(names(*embed).count("embed_centroids.weight"));
  torch::Tensor y = embed->forward(torch::randn({6, 4, 3}), torch::randn({6, 5}));
  EXPECT_EQ(y.sizes(), torch::IntArrayRef({6, 2, 16}));
  EXPECT_THROW(embed->forward(torch::randn({6, 4, 3})), c10::Error);
}

TEST(EmbedTransformer, FullReadout) {
  StreamEmbedTransformer embed(options(3, 16, 4, "full"));
  const auto n = names(*embed);
  EXPECT_TRUE(n.count("unembed.weight"));
  EXPECT_TRUE(n.count("ln_final.weight"));
  for (const auto& p : embed->named_parameters())
    if (p.key() == "unembed.weight") EXPECT_EQ(p.value().sizes(), torch::IntArrayRef({28, 48}));
  torch::Tensor y = embed->forward(torch::randn({6, 4, 3}), torch::randn({6, 5}));
  EXPECT_EQ(y.sizes(), torch::IntArrayRef({6, 2, 16}));
}

TEST(EmbedTransformer, PositionalEncodingFollowsTheFormula) {
  torch::Tensor pe = harmonic_encoding(5, 6, torch::TensorOptions().dtype(torch::kFloat64));
  for (int p = 0; p < 5; ++p)
    for (int i = 0; i < 3; ++i) {
      const double a = p * std::exp(-2.0 * i * std::log(10000.0) / 6);
      EXPECT_NEAR(pe[p][2 * i].item<double>(), std::sin(a), 1e-12);
      EXPECT_NEAR(pe[p][2 * i + 1].item<double>(), std::cos(a), 1e-12);
    }
}

}  // namespace
}  // namespace wg
