// fca report: the HTML report and Markdown summary from result files.
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "core/file_io.h"
#include "report/report.h"

namespace fca::cli {

void add_report_command(CLI::App& app) {
  struct Flags {
    ReportInputs in;
    std::string out, markdown;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("report", "Write a self-contained HTML report (and a Markdown summary) from result files");
  cmd->add_option("--audit", f->in.audits, "audit.json files")->check(CLI::ExistingFile);
  cmd->add_option("--exec", f->in.execs, "exec.json files")->check(CLI::ExistingFile);
  cmd->add_option("--aggregate", f->in.aggregates, "aggregate.json files")->check(CLI::ExistingFile);
  cmd->add_option("--eval", f->in.evals, "evaluation JSON files (for the model-quality table)")->check(CLI::ExistingFile);
  cmd->add_option("--train", f->in.train_logs, "training logs (.jsonl)")->check(CLI::ExistingFile);
  cmd->add_option("--title", f->in.title, "Report title")->capture_default_str();
  cmd->add_option("--out", f->out, "HTML file to write")->required();
  cmd->add_option("--markdown", f->markdown, "Markdown summary to write (default: <out> with .md)");
  cmd->callback([f] {
    ensure_file_destination(f->out, "--out");
    if (!f->markdown.empty()) ensure_file_destination(f->markdown, "--markdown");
    const ReportData data = load_report_data(f->in);
    const std::string html = report_html(data), md = report_markdown(data);
    write_file_atomically(f->out, [&](std::ostream& o) { o << html; });
    std::string md_path = f->markdown;
    if (md_path.empty()) {
      md_path = f->out;
      const size_t dot = md_path.rfind('.');
      md_path = (dot == std::string::npos ? md_path : md_path.substr(0, dot)) + ".md";
    }
    write_file_atomically(md_path, [&](std::ostream& o) { o << md; });
    std::printf("%s", md.c_str());
    std::printf("report: %s\nsummary: %s\n", f->out.c_str(), md_path.c_str());
  });
}

}  // namespace fca::cli
