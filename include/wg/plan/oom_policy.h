// What a rank does when a step runs out of memory: every rank retries the
// step together; a rank that ran out first recomputes one more piece (the
// cheapest bytes per second of recompute the profile measured, or, without
// a profile, attention first), up to oom_max_retries attempts. The trainer
// detects the failure and calls on_out_of_memory; the policy lives here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "wg/plan/cost_model.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

struct OomEvent {
  int64_t step = 0;
  int attempt = 0;   // 0 for the first failure of the step
  int rank = 0;
  std::string what;  // this rank's error; empty when another rank ran out
};

class OomPolicy {
 public:
  // `costs`: the planner's measurements (nothing for a manual plan);
  // `budget`: quoted in the final error.
  explicit OomPolicy(int max_retries, std::optional<CostModel> costs = std::nullopt,
                     std::string budget = "none (manual plan)");

  // The plan to retry the step with. Throws std::runtime_error (naming the
  // step, the budget and the plan) when the retries are spent or every
  // piece is already recomputed.
  RecomputePlan on_out_of_memory(const RecomputePlan& current, const OomEvent& event);

  int events() const { return events_; }  // pieces added so far

 private:
  int max_retries_;
  std::optional<CostModel> costs_;
  std::string budget_;
  int events_ = 0;
};

}  // namespace wg
