// The ranks of a distributed run and the few collectives fca needs (docs/cluster.md). Every
// collective is blocking and combines in rank order, never in arrival order, so no result depends
// on how the ranks were scheduled. One process alone is the communicator of size 1 (every
// collective is then a copy); an MPI communicator exists where fca is built with MPI (CMake option
// FCA_WITH_MPI, on when OpenMPI is found) and was started by mpirun or srun.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace fca {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  bool root() const { return rank() == 0; }
  // Rank 0's bytes, on every rank.
  virtual void broadcast(std::string& bytes) const { (void)bytes; }
  // Every rank's bytes on rank 0, in rank order; an empty list on the other ranks.
  virtual std::vector<std::string> gather(std::string bytes) const { return {std::move(bytes)}; }
  // data[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ... over the ranks' data, on every rank: the order of
  // a sequential sum over the ranks' shares, whatever the arrival order.
  virtual void sum_in_rank_order(float* data, size_t n) const { (void)data, (void)n; }
  // Every rank's value on every rank, in rank order.
  virtual std::vector<double> all_gather(double value) const { return {value}; }
  virtual void barrier() const {}
  // "1 process", or "rank 1 of 3 (MPI) on host-a".
  virtual std::string description() const { return "1 process"; }
};

// This process alone.
const Communicator& single_process();

// The world this process runs in. start_world() (main, before anything else) joins MPI when the
// environment says mpirun or srun started this process (OMPI_COMM_WORLD_SIZE, PMIX_RANK or
// PMI_SIZE) and throws Error when that is so but this build has no MPI; otherwise the world is
// single_process(). stop_world() leaves MPI; abort_world() ends every rank (an error on one rank
// would otherwise leave the others waiting in a collective forever).
void start_world(int* argc, char*** argv);
const Communicator& world();
void stop_world();
[[noreturn]] void abort_world(int code);

}  // namespace fca
