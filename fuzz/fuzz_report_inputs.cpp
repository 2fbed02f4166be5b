// audit.json, exec.json and aggregate.json as fca report reads them, then the report rendered from
// what it accepted. Seeds include the audits of degenerate models (Uniform, Dense, Fixed), whose
// undefined statistics (null with the reason) are valid; malformed intervals must stay errors.
#include "fuzz_util.h"
#include "report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fca::fuzz::work_dir() + "/input.json";
  fca::fuzz::write_file(path, data, size);
  for (int kind = 0; kind < 3; ++kind)
    fca::fuzz::expect_ok_or_error([&] {
      fca::ReportInputs in;
      (kind == 0 ? in.audits : kind == 1 ? in.execs : in.aggregates).push_back(path);
      const fca::ReportData d = fca::load_report_data(in);
      (void)fca::report_html(d);
      (void)fca::report_markdown(d);
    });
  return 0;
}
