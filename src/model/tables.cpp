// The fixed tables (see header). The float32 steps are LibTorch's CPU ops
// in the order upstream's PyTorch code runs them (int64 positions times a
// float32 scalar, exp, sin and cos in float32), so the values match bit for
// bit before the bfloat16 rounding, and after it but where a 1-ulp float32
// difference straddles a bfloat16 rounding boundary (wg-model.md §3.2).
#include "wg/model/tables.h"

#include <cmath>

#include "wg/data/healpix.h"

namespace wg {

namespace {
torch::Tensor bf16_rounded(const torch::Tensor& x) { return x.to(torch::kBFloat16).to(torch::kFloat32); }
}  // namespace

ModelTables ModelTables::build(int healpix_level, int64_t dim_local, int64_t dim_global, int64_t num_queries) {
  ModelTables t;
  const HealpixGrid grid(healpix_level);
  t.num_cells = grid.num_cells();
  using torch::indexing::Slice;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);

  // pe_embed[p, 2k] = sin(p * exp(2k * -(ln 1024 / D_l))), [p, 2k+1] = cos(...)
  {
    torch::Tensor pe = torch::zeros({kPeEmbedRows, dim_local});
    const torch::Tensor position = torch::arange(0, kPeEmbedRows, i64).unsqueeze(1);
    const torch::Tensor div = torch::exp(torch::arange(0, dim_local, 2, i64) * -(std::log(double(kPeEmbedRows)) / double(dim_local)));
    const int64_t even = (dim_local + 1) / 2, odd = dim_local / 2;
    pe.index_put_({Slice(), Slice(0, torch::indexing::None, 2)}, torch::sin(position * div.narrow(0, 0, even)));
    pe.index_put_({Slice(), Slice(1, torch::indexing::None, 2)}, torch::cos(position * div.narrow(0, 0, odd)));
    t.pe_embed = bf16_rounded(pe);
  }
  // pe_global[c, q, 2j] = bf16(bf16(0.5 sin(8q x_j)) + sin(c x_j)), odd lanes with cos,
  // x_j = fp32(fp32(2 pi) * 2j) / D_g.
  {
    const torch::Tensor xs = 2.0 * M_PI * torch::arange(0, dim_global, 2, i64) / double(dim_global);
    const torch::Tensor q8 = 8 * torch::arange(num_queries, i64), cells = torch::arange(t.num_cells, i64);
    const auto lanes = [&](bool sine) {
      const auto f = [sine](const torch::Tensor& a) { return sine ? torch::sin(a) : torch::cos(a); };
      const torch::Tensor slot = bf16_rounded(0.5 * f(torch::outer(q8, xs)));  // [nq, D/2]
      const torch::Tensor cell = f(torch::outer(cells, xs)).unsqueeze(1);       // [C, 1, D/2]
      return bf16_rounded(slot.unsqueeze(0) + cell);                            // [C, nq, D/2]
    };
    torch::Tensor pe = torch::zeros({t.num_cells, num_queries, dim_global});
    pe.index_put_({"...", Slice(0, torch::indexing::None, 2)}, lanes(true));
    pe.index_put_({"...", Slice(1, torch::indexing::None, 2)}, lanes(false));
    t.pe_global = pe;
  }
  {
    const std::vector<int32_t>& nb = grid.hp_nbours();  // [C, 9]
    t.hp_nbours = torch::from_blob(const_cast<int32_t*>(nb.data()), {t.num_cells, 9}, torch::kInt32).to(torch::kInt64);
  }
  return t;
}

ModelTables ModelTables::to(const torch::Device& device) const {
  ModelTables t = *this;
  t.pe_embed = pe_embed.to(device);
  t.pe_global = pe_global.to(device);
  t.hp_nbours = hp_nbours.to(device);
  return t;
}

}  // namespace wg
