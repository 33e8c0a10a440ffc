// Checked MPI/CUDA/NCCL calls: a failing call becomes an exception naming
// the call, file:line and the library's own message.
#pragma once

#include <stdexcept>
#include <string>

namespace wg {

std::string mpi_error_string(int code);

// Waits for a non-blocking MPI request without spinning a core: tests it,
// briefly spins, then sleeps between tests (OpenMPI's blocking calls
// busy-poll, which on a node whose cores all compute slows the ranks
// themselves). `request` is an MPI_Request passed by address.
void wait_politely(void* request);

#define WG_MPI_CHECK(call)                                                                              \
  do {                                                                                                  \
    const int wg_mpi_rc_ = (call);                                                                      \
    if (wg_mpi_rc_ != 0 /* MPI_SUCCESS */)                                                              \
      throw std::runtime_error(std::string(#call) + " failed at " + __FILE__ + ":" +                   \
                               std::to_string(__LINE__) + ": " + ::wg::mpi_error_string(wg_mpi_rc_)); \
  } while (0)

}  // namespace wg
