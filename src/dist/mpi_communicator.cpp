// Communicator over MPI for host memory (see communicator.h).
#include <mpi.h>

#include "wg/dist/check.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"

namespace wg {

namespace {
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const DistContext& c) : rank_(c.rank()), size_(c.size()) {
    WG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));  // gradients get their own channel
    WG_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  }
  ~MpiCommunicator() override { MPI_Comm_free(&comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void allreduce_sum(float* data, size_t count) override {
    MPI_Request r;
    WG_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, comm_, &r));
    wait_politely(&r);
  }
  void broadcast(float* data, size_t count, int root) override {
    WG_MPI_CHECK(MPI_Bcast(data, int(count), MPI_FLOAT, root, comm_));
  }

 private:
  int rank_, size_;
  MPI_Comm comm_;
};
}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const DistContext& context) {
  return std::make_unique<MpiCommunicator>(context);
}

}  // namespace wg
