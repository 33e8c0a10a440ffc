// wg::layer_norm_again (wg/model/layer_norm_again.h): a layer norm's
// output made again from its row statistics, with native_layer_norm's
// bits where the check says so (on the machines this project runs on),
// and within rounding of them anywhere.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/thread_count.h"
#include "wg/model/layer_norm_again.h"

namespace wg {
namespace {

TEST(LayerNormAgain, GivesNativeLayerNormsOutputFromItsStatistics) {
  torch::manual_seed(4);
  const bool bits = layer_norm_again_matches();
  std::cout << "layer_norm_again gives native_layer_norm's bits here: " << (bits ? "yes" : "no") << "\n";
  for (const int64_t d : {1, 3, 8, 31, 32, 64, 100, 128, 257, 512}) {
    for (const bool affine : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "width " << d << (affine ? ", affine" : ""));
      const torch::Tensor x = torch::randn({3, 401, d}) * 5 - 2;
      const torch::Tensor w = affine ? torch::randn({d}) : torch::Tensor(),
                          b = affine ? torch::randn({d}) : torch::Tensor();
      const auto [y, mean, rstd] = at::native_layer_norm(x, {d}, w, b, 1e-4);
      const torch::Tensor again = layer_norm_again(x, mean, rstd, w, b);
      EXPECT_TRUE(torch::allclose(again, y, 1e-5, 1e-5));
      if (bits) EXPECT_TRUE(torch::equal(again, y));
    }
  }
}

TEST(LayerNormAgain, TheResultDoesNotDependOnTheThreads) {
  const torch::Tensor x = torch::randn({1000, 48}), w = torch::randn({48}), b = torch::randn({48});
  const auto [y, mean, rstd] = at::native_layer_norm(x, {48}, w, b, 1e-5);
  const std::vector<torch::Tensor> out =
      testing::on_each_thread_count({1, 2, 3}, [&] { return layer_norm_again(x, mean, rstd, w, b); });
  for (size_t i = 1; i < out.size(); ++i) EXPECT_TRUE(torch::equal(out[i], out[0]));
}

TEST(LayerNormAgain, BadInputIsRefused) {
  const torch::Tensor x = torch::randn({4, 8});
  const auto [y, mean, rstd] = at::native_layer_norm(x, {8}, {}, {}, 1e-5);
  EXPECT_THROW(layer_norm_again(x.t(), mean, rstd), c10::Error);                    // not contiguous
  EXPECT_THROW(layer_norm_again(x.to(torch::kDouble), mean, rstd), c10::Error);     // not float32
  EXPECT_THROW(layer_norm_again(x, mean.narrow(0, 0, 3), rstd), c10::Error);        // a statistic short
  EXPECT_THROW(layer_norm_again(x, mean, rstd, torch::ones({8}), {}), c10::Error);  // weight without bias
  EXPECT_THROW(layer_norm_again(x, mean, rstd, torch::ones({7}), torch::ones({7})), c10::Error);
  EXPECT_FALSE(layer_norm_again_runs_on(x.t()));
  EXPECT_FALSE(layer_norm_again_runs_on(x.to(torch::kDouble)));
}

}  // namespace
}  // namespace wg
