// Communicator over NCCL for device memory (see communicator.h). Rank 0
// makes the ncclUniqueId, MPI_Bcast shares it, ncclCommInitRank builds the
// communicator; collectives run on the communicator's own stream. Compiled
// when the CUDA toolkit with NCCL is found (WG_WITH_NCCL); otherwise the
// factory says so.
#include "wg/dist/communicator.h"

#include <stdexcept>

#ifdef WG_WITH_NCCL
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "wg/dist/check.h"
#include "wg/dist/context.h"

#define WG_CUDA_CHECK(call)                                                                             \
  do {                                                                                                  \
    const cudaError_t wg_cuda_rc_ = (call);                                                             \
    if (wg_cuda_rc_ != cudaSuccess)                                                                     \
      throw std::runtime_error(std::string(#call) + " failed at " + __FILE__ + ":" +                   \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(wg_cuda_rc_));     \
  } while (0)

#define WG_NCCL_CHECK(call)                                                                             \
  do {                                                                                                  \
    const ncclResult_t wg_nccl_rc_ = (call);                                                            \
    if (wg_nccl_rc_ != ncclSuccess)                                                                     \
      throw std::runtime_error(std::string(#call) + " failed at " + __FILE__ + ":" +                   \
                               std::to_string(__LINE__) + ": " + ncclGetErrorString(wg_nccl_rc_));     \
  } while (0)

namespace wg {

namespace {
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const DistContext& c, int device) : rank_(c.rank()), size_(c.size()), device_(device) {
    WG_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id;
    if (rank_ == 0) WG_NCCL_CHECK(ncclGetUniqueId(&id));
    WG_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    WG_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    WG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  void allreduce_sum(float* data, size_t count) override {
    WG_CUDA_CHECK(cudaSetDevice(device_));
    // The producer of `data` ran on the default stream: order after it.
    WG_CUDA_CHECK(cudaDeviceSynchronize());
    WG_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream_));
    WG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void broadcast(float* data, size_t count, int root) override {
    WG_CUDA_CHECK(cudaSetDevice(device_));
    WG_CUDA_CHECK(cudaDeviceSynchronize());
    WG_NCCL_CHECK(ncclBroadcast(data, data, count, ncclFloat32, root, comm_, stream_));
    WG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};
}  // namespace

bool nccl_compiled_in() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(const DistContext& context, int device) {
  int count = 0;  // cudaGetDeviceCount leaves it untouched when no driver/GPU
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    throw std::runtime_error("NCCL communicator: no CUDA device is usable on rank " + std::to_string(context.rank()));
  return std::make_unique<NcclCommunicator>(context, device);
}

}  // namespace wg

#else

namespace wg {
bool nccl_compiled_in() { return false; }
std::unique_ptr<Communicator> make_nccl_communicator(const DistContext&, int) {
  throw std::runtime_error("this build has no NCCL (the CUDA toolkit with NCCL was not found at configure time)");
}
}  // namespace wg

#endif
