#include "core/communicator.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

#if FCA_WITH_MPI
#include <mpi.h>
#endif

namespace fca {
namespace {

// The launcher's size variable, if any: OpenMPI's mpirun, PMIx (OpenMPI or srun --mpi=pmix), PMI
// (MPICH, srun --mpi=pmi2).
const char* launcher_variable(std::string* value) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(name)) {
      *value = v;
      return name;
    }
  return nullptr;
}

#if FCA_WITH_MPI
// MPI counts are int: messages go in pieces of at most 1 GiB.
constexpr size_t kPiece = size_t(1) << 30;

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    throw Error(std::string("MPI ") + what + " failed: " + std::string(text, size_t(length)));
  }
}

void send_bytes(const void* data, size_t n, int to) {
  const auto* p = static_cast<const char*>(data);
  const unsigned long long size = n;
  check(MPI_Send(&size, 1, MPI_UNSIGNED_LONG_LONG, to, 0, MPI_COMM_WORLD), "send");
  for (size_t off = 0; off < n; off += kPiece)
    check(MPI_Send(p + off, int(std::min(kPiece, n - off)), MPI_BYTE, to, 1, MPI_COMM_WORLD), "send");
}

// The size announced by send_bytes.
size_t receive_size(int from) {
  unsigned long long size = 0;
  check(MPI_Recv(&size, 1, MPI_UNSIGNED_LONG_LONG, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "receive");
  return size_t(size);
}

void receive_into(void* data, size_t n, int from) {
  auto* p = static_cast<char*>(data);
  for (size_t off = 0; off < n; off += kPiece)
    check(MPI_Recv(p + off, int(std::min(kPiece, n - off)), MPI_BYTE, from, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "receive");
}

void broadcast_raw(void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  for (size_t off = 0; off < n; off += kPiece)
    check(MPI_Bcast(p + off, int(std::min(kPiece, n - off)), MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "size");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    host_ = host;
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void broadcast(std::string& bytes) const override {
    unsigned long long n = bytes.size();
    check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "broadcast");
    bytes.resize(size_t(n));
    broadcast_raw(bytes.data(), bytes.size());
  }
  std::vector<std::string> gather(std::string bytes) const override {
    if (rank_ != 0) {
      send_bytes(bytes.data(), bytes.size(), 0);
      return {};
    }
    std::vector<std::string> all(static_cast<size_t>(size_));
    all[0] = std::move(bytes);
    for (int r = 1; r < size_; ++r) {
      all[size_t(r)].resize(receive_size(r));
      receive_into(all[size_t(r)].data(), all[size_t(r)].size(), r);
    }
    return all;
  }
  void sum_in_rank_order(float* data, size_t n) const override {
    if (rank_ != 0) {
      send_bytes(data, n * sizeof(float), 0);
    } else {
      std::vector<float> x(n);
      for (int r = 1; r < size_; ++r) {  // ((x_0 + x_1) + x_2) ...: rank r's share is added r-th
        if (const size_t bytes = receive_size(r); bytes != n * sizeof(float))
          throw Error("MPI: rank " + std::to_string(r) + " sent " + std::to_string(bytes) + " bytes to sum, expected " +
                      std::to_string(n * sizeof(float)));
        receive_into(x.data(), n * sizeof(float), r);
        for (size_t i = 0; i < n; ++i) data[i] = data[i] + x[i];
      }
    }
    broadcast_raw(data, n * sizeof(float));
  }
  std::vector<double> all_gather(double value) const override {
    std::vector<double> all(static_cast<size_t>(size_));
    check(MPI_Allgather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD), "all-gather");
    return all;
  }
  void barrier() const override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }
  std::string description() const override {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (MPI) on " + host_;
  }

 private:
  int rank_ = 0, size_ = 1;
  std::string host_;
};
#endif

const Communicator* world_ = nullptr;
#if FCA_WITH_MPI
std::unique_ptr<MpiCommunicator> mpi_world_;
#endif

}  // namespace

const Communicator& single_process() {
  static const Communicator alone;
  return alone;
}


void start_world(int* argc, char*** argv) {
  std::string value;
  const char* variable = launcher_variable(&value);
  if (variable == nullptr) return;
#if FCA_WITH_MPI
  int provided = 0;
  // Only the main thread calls MPI; OpenMP threads compute between the calls.
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "initialisation");
  mpi_world_ = std::make_unique<MpiCommunicator>();
  world_ = mpi_world_.get();
#else
  (void)argc, (void)argv;
  // PMIx names the rank, not the size: Slurm's task count says whether there are others.
  if (std::strcmp(variable, "PMIX_RANK") == 0) value = std::getenv("SLURM_NTASKS") ? std::getenv("SLURM_NTASKS") : "unknown";
  if (value != "1")
    throw Error(std::string("started by an MPI launcher (") + variable + "=" + value +
                ") but this fca was built without MPI: install libopenmpi-dev and rebuild (docs/cluster.md); "
                "run without mpirun for a single process");
#endif
}

const Communicator& world() { return world_ != nullptr ? *world_ : single_process(); }

void stop_world() {
#if FCA_WITH_MPI
  if (mpi_world_) {
    MPI_Finalize();
    world_ = nullptr;
    mpi_world_.reset();
  }
#endif
}

void abort_world(int code) {
#if FCA_WITH_MPI
  if (mpi_world_ && mpi_world_->size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace fca
