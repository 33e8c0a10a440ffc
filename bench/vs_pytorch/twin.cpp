// bench_vs_pytorch's twin side (see twin.h).
#include "twin.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "text.h"
#include "wg/util/side_thread.h"

namespace wg::bench::vs {

std::string twin_command(const TwinSettings& s, const std::string& modes, int warmup, int steps, int profiled,
                         bool dropout, const std::string& json_out, const std::string& log) {
  std::string dump_args;
  for (const std::string& d : s.dumps) dump_args += " " + quote(d);
  std::ostringstream os;
  os.precision(17);
  os << (s.blas_omp ? "" : "OPENBLAS_NUM_THREADS=1 ") << "OMP_NUM_THREADS=" << s.threads << " " << quote(s.python)
     << " " << quote(std::string(WG_SOURCE_DIR) + "/tests/reference/wg_twin.py") << " bench" << dump_args
     << (s.cuda ? std::string(" --device cuda") + (s.bf16 ? " --bf16" : "") : "") << " --modes " << modes
     << " --threads " << s.threads << " --warmup " << warmup << " --steps " << steps << " --profiled-steps " << profiled
     << " --lr " << join_doubles(s.lrs) << " --beta1 " << join_doubles(s.beta1s) << " --beta2 " << s.beta2 << " --eps "
     << s.eps << " --weight-decay " << s.weight_decay << " --grad-clip " << s.grad_clip << " --seed " << s.seed
     << " --embed-dropout-final-rate " << s.embed_dropout_final_rate << (dropout ? "" : " --no-dropout") << " --out "
     << quote(json_out) << " > " << quote(log) << " 2>&1";
  return os.str();
}

nlohmann::json run_twin(const std::string& command, const std::string& log, const std::string& json_out) {
  // From a thread off OpenMP's binding (side_thread.h): the twin's process
  // inherits its CPUs, not the one this thread is bound to.
  int status = 0;
  std::thread([&] {
    unbind_side_thread("twin launcher");
    status = std::system(command.c_str());
  }).join();
  if (status != 0) {
    std::ifstream f(log);
    std::cerr << "twin bench failed: " << command << "\n" << f.rdbuf() << "\n";
    std::exit(1);
  }
  return nlohmann::json::parse(std::ifstream(json_out));
}

}  // namespace wg::bench::vs
