// The one error type of the wgtrain program: a message and the exit code it
// ends the program with, turned into that exit code in one place (main).
// Exit codes: 0 done, 1 runtime failure (any other exception; the job is
// aborted), 2 bad command line, configuration, data or initial weights,
// 3 non-finite loss under nan_policy: error.
#pragma once

#include <stdexcept>
#include <string>

namespace wg {

class DistContext;

class RunError : public std::runtime_error {
 public:
  // Who raises it, and so who reports it.
  enum class Scope {
    EveryRankSame,  // every rank raises the same error (command line, config): rank 0 reports it
    EveryRankOwn,   // every rank raises it, each with its own message (may be empty: nothing to add)
  };
  RunError(int exit_code, const std::string& message, Scope scope = Scope::EveryRankSame)
      : std::runtime_error(message), exit_code_(exit_code), scope_(scope) {}
  int exit_code() const { return exit_code_; }
  Scope scope() const { return scope_; }

 private:
  int exit_code_;
  Scope scope_;
};

// Reports `e` as its scope says (one log line per line of the message) and
// returns its exit code.
int report(const RunError& e, const DistContext& dist);

}  // namespace wg
