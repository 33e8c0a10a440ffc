// Collective communication behind one interface, so the trainer does not
// know which library moves its gradients:
//   MpiCommunicator  - host memory, MPI (CPU runs)
//   NcclCommunicator - device memory, NCCL, bootstrapped through MPI (GPU
//                      runs; compiled whenever the CUDA toolkit with NCCL is
//                      found, usable only where a GPU is)
// Buffers are raw pointers to float32 (host or device, per implementation).
// All ranks must call collectives in the same order.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace wg {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // In place: data[i] = sum over ranks. Blocks until done (for NCCL: until
  // enqueued work finished on the communicator's stream).
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual void broadcast(float* data, size_t count, int root) = 0;
};

class DistContext;

std::unique_ptr<Communicator> make_mpi_communicator(const DistContext& context);
// Throws std::runtime_error when this build has no NCCL or no GPU is usable.
std::unique_ptr<Communicator> make_nccl_communicator(const DistContext& context, int device);
bool nccl_compiled_in();

}  // namespace wg
