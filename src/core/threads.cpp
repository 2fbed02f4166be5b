#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

namespace fca {

void set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int thread_count() { return omp_get_max_threads(); }

}  // namespace fca
