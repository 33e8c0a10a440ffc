// The out-of-memory fallback (see header).
#include "wg/plan/oom_policy.h"

#include <spdlog/spdlog.h>

#include <stdexcept>

namespace wg {

OomPolicy::OomPolicy(int max_retries, std::optional<CostModel> costs, std::string budget)
    : max_retries_(max_retries), costs_(std::move(costs)), budget_(std::move(budget)) {}

RecomputePlan OomPolicy::on_out_of_memory(const RecomputePlan& current, const OomEvent& e) {
  if (e.attempt >= max_retries_)
    throw std::runtime_error("out of memory in step " + std::to_string(e.step) + " after " +
                             std::to_string(e.attempt + 1) + " attempts (oom_max_retries " +
                             std::to_string(max_retries_) + "); budget " + budget_ +
                             "; smallest plan tried: " + current.summary() +
                             (e.what.empty() ? "" : "; rank " + std::to_string(e.rank) + ": " + e.what));
  if (e.what.empty()) return current;  // another rank ran out: retry as we are
  int chosen = -1;
  if (costs_) {  // the cheapest bytes first, as the planner measured them
    PlanModes modes;
    for (const auto& p : costs_->pieces) modes.push_back(current.mode(p.key));
    const int i = next_piece_to_recompute(*costs_, modes);
    if (i >= 0) {
      for (size_t j = 0; j < current.size(); ++j)
        if (current.pieces()[j] == costs_->pieces[size_t(i)].key) chosen = int(j);
    }
  } else {  // no measurements: attention layers (the largest activations) first, then the rest
    for (int pass = 0; pass < 2 && chosen < 0; ++pass)
      for (size_t j = 0; j < current.size() && chosen < 0; ++j)
        if (!current.recomputed(j) && (pass == 1 || current.pieces()[j].is_attention())) chosen = int(j);
  }
  if (chosen < 0)
    throw std::runtime_error("out of memory at step " + std::to_string(e.step) + " on rank " + std::to_string(e.rank) +
                             " with every piece already recomputed (" + current.summary() + "): " + e.what);
  RecomputePlan next = current;
  next.set(size_t(chosen), true);
  ++events_;
  spdlog::warn("rank {} step {}: out of memory ({}); now also recomputing {} ({}), retrying the step", e.rank, e.step,
               e.what, next.pieces()[size_t(chosen)].str(), next.summary());
  return next;
}

}  // namespace wg
