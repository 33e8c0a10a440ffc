// The distributed context of a process: MPI's lifetime (RAII), global rank
// and size, local rank and ranks on the node, node index, host name. Built
// once in main and passed down; no globals.
//
// Local rank: OMPI_COMM_WORLD_LOCAL_RANK (mpirun), else SLURM_LOCALID
// (srun), else the rank within MPI_Comm_split_type(SHARED). The node count
// and index always come from grouping host names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wg/dist/node_info.h"

namespace wg {


class DistContext {
 public:
  // Initialises MPI (thread level MULTIPLE requested) unless it already is.
  DistContext(int* argc, char*** argv);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool threads_multiple() const { return threads_multiple_; }
  const NodeInfo& node() const { return node_; }
  int num_nodes() const { return num_nodes_; }

  // Small collectives for control values (not gradients).
  double allreduce_max(double v) const;
  double allreduce_sum(double v) const;
  int64_t allreduce_min(int64_t v) const;
  std::vector<std::string> gather_strings(const std::string& s, int root = 0) const;  // root gets all
  std::string broadcast_string(const std::string& s, int root = 0) const;
  void barrier() const;
  // Ends every rank of the job now (after a failure on this rank).
  [[noreturn]] void abort(int code) const;

 private:
  bool owns_mpi_ = false;
  bool threads_multiple_ = false;
  int rank_ = 0, size_ = 1, num_nodes_ = 1;
  NodeInfo node_;
};

// One non-blocking gather of a fixed-size record from every rank to `root`,
// at a time: start() sends this rank's record (copied) and returns at once;
// wait() completes it and, on the root, returns every rank's record in rank
// order (size() * record_bytes bytes). The rank-0 coordinator's window
// exchange, off the step's critical path.
class AsyncGather {
 public:
  AsyncGather(const DistContext& dist, size_t record_bytes, int root = 0);
  ~AsyncGather();  // a gather still in flight is left to MPI_Abort (it needs the other ranks)
  AsyncGather(const AsyncGather&) = delete;
  AsyncGather& operator=(const AsyncGather&) = delete;

  void start(const void* record);
  bool active() const { return active_; }
  // Whether the active gather has completed (MPI_Test: never blocks).
  bool done();
  const std::vector<unsigned char>& wait();  // the gathered records (root), empty elsewhere

 private:
  struct Request;
  const DistContext& dist_;
  size_t record_bytes_;
  int root_;
  bool active_ = false;
  bool complete_ = false;  // done() saw it complete
  std::vector<unsigned char> sent_, received_;
  std::unique_ptr<Request> request_;
};

// Which local rank the environment names (OMPI, then SLURM), or -1.
int local_rank_from_env();

}  // namespace wg
