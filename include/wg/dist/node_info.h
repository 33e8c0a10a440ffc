// Where a rank runs: its host, node and local rank, and its device's memory.
// A plain record (no MPI): the distributed context fills it, the per-node
// recomputation rules (wg/plan/node_rules.h) read it.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

struct NodeInfo {
  std::string hostname;
  int node_index = 0;       // hosts sorted by name
  int local_rank = 0;
  int ranks_on_node = 1;
  int64_t device_memory_bytes = 0;  // filled by the caller once the device is known
};

}  // namespace wg
