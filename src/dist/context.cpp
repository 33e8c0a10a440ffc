// MPI bootstrap (see header).
#include "wg/dist/context.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <set>

#include "wg/dist/check.h"

namespace wg {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}

void wait_politely(void* request) {
  auto* r = static_cast<MPI_Request*>(request);
  int done = 0;
  for (int i = 0; !done; ++i) {
    WG_MPI_CHECK(MPI_Test(r, &done, MPI_STATUS_IGNORE));
    if (!done && i >= 20) std::this_thread::sleep_for(std::chrono::microseconds(i < 200 ? 20 : 200));
  }
}

int local_rank_from_env() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return int(r);
    }
  return -1;
}

DistContext::DistContext(int* argc, char*** argv) {
  int initialized = 0;
  WG_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    WG_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    WG_MPI_CHECK(MPI_Query_thread(&provided));
  }
  threads_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // Errors come back as codes (checked), not as MPI's own abort.
  WG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  WG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  WG_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  node_.hostname = host;
  const auto hosts = [&] {  // every rank's host name, on every rank
    std::vector<char> all(size_t(size_) * 256, 0);
    WG_MPI_CHECK(MPI_Allgather(host, 256, MPI_CHAR, all.data(), 256, MPI_CHAR, MPI_COMM_WORLD));
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.emplace_back(&all[size_t(r) * 256]);
    return out;
  }();
  const std::set<std::string> unique(hosts.begin(), hosts.end());
  num_nodes_ = int(unique.size());
  node_.node_index = int(std::distance(unique.begin(), unique.find(node_.hostname)));
  node_.ranks_on_node = int(std::count(hosts.begin(), hosts.end(), node_.hostname));

  MPI_Comm shared;
  WG_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared));
  int shared_rank = 0;
  WG_MPI_CHECK(MPI_Comm_rank(shared, &shared_rank));
  MPI_Comm_free(&shared);
  const int env = local_rank_from_env();
  node_.local_rank = env >= 0 ? env : shared_rank;
}

DistContext::~DistContext() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

namespace {
double allreduce_double(double v, MPI_Op op) {
  double out = 0;
  MPI_Request r;
  WG_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD, &r));
  wait_politely(&r);
  return out;
}
}  // namespace

double DistContext::allreduce_max(double v) const { return allreduce_double(v, MPI_MAX); }

double DistContext::allreduce_sum(double v) const { return allreduce_double(v, MPI_SUM); }

int64_t DistContext::allreduce_min(int64_t v) const {
  int64_t out = 0;
  WG_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
  return out;
}

std::vector<std::string> DistContext::gather_strings(const std::string& s, int root) const {
  int len = int(s.size());
  std::vector<int> lens(size_t(size_), 0), displs(size_t(size_), 0);
  WG_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, MPI_COMM_WORLD));
  int total = 0;
  for (int r = 0; r < size_; ++r) { displs[size_t(r)] = total; total += lens[size_t(r)]; }
  std::vector<char> all(size_t(std::max(total, 1)));
  WG_MPI_CHECK(MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, root,
                           MPI_COMM_WORLD));
  std::vector<std::string> out;
  if (rank_ == root)
    for (int r = 0; r < size_; ++r) out.emplace_back(&all[size_t(displs[size_t(r)])], size_t(lens[size_t(r)]));
  return out;
}

std::string DistContext::broadcast_string(const std::string& s, int root) const {
  int len = int(s.size());
  WG_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD));
  std::string out = rank_ == root ? s : std::string(size_t(len), '\0');
  WG_MPI_CHECK(MPI_Bcast(out.data(), len, MPI_CHAR, root, MPI_COMM_WORLD));
  return out;
}

void DistContext::barrier() const {
  MPI_Request r;
  WG_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r));
  wait_politely(&r);
}

struct AsyncGather::Request {
  MPI_Request request = MPI_REQUEST_NULL;
};

AsyncGather::AsyncGather(const DistContext& dist, size_t record_bytes, int root)
    : dist_(dist), record_bytes_(record_bytes), root_(root), request_(std::make_unique<Request>()) {}

AsyncGather::~AsyncGather() = default;

void AsyncGather::start(const void* record) {
  if (active_) wait();
  sent_.assign(static_cast<const unsigned char*>(record), static_cast<const unsigned char*>(record) + record_bytes_);
  received_.assign(dist_.rank() == root_ ? record_bytes_ * size_t(dist_.size()) : 0, 0);
  WG_MPI_CHECK(MPI_Igather(sent_.data(), int(record_bytes_), MPI_BYTE,
                           dist_.rank() == root_ ? received_.data() : nullptr, int(record_bytes_), MPI_BYTE, root_,
                           MPI_COMM_WORLD, &request_->request));
  active_ = true;
}

bool AsyncGather::done() {
  if (!active_) return false;
  if (!complete_) {
    int flag = 0;  // MPI_Test frees a completed request: wait() then only hands out the records
    WG_MPI_CHECK(MPI_Test(&request_->request, &flag, MPI_STATUS_IGNORE));
    complete_ = flag != 0;
  }
  return complete_;
}

const std::vector<unsigned char>& AsyncGather::wait() {
  if (active_) {
    if (!complete_) wait_politely(&request_->request);
    active_ = complete_ = false;
  }
  return received_;
}

void DistContext::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace wg
