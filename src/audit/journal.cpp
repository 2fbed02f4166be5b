#include "audit/journal.h"

#include <unistd.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"

namespace fca {
namespace {

// The header line of an existing journal, or nothing when the file is missing or empty.
std::optional<nlohmann::json> read_header(const std::string& path, std::vector<std::string>* rest) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line) || line.empty()) return std::nullopt;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": not an audit journal (its first line is not JSON); delete it to start the audit over");
  }
  if (!header.is_object() || header.value("format", std::string()) != kJournalFormat || !header.contains("identity") ||
      !header.contains("batch") || !header["batch"].is_number_integer())
    throw Error(path + ": not an " + std::string(kJournalFormat) + " journal; delete it to start the audit over");
  if (rest != nullptr) {
    // Complete lines only: the last one may have been cut short by a kill (no newline at its end).
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t start = 0;
    for (size_t end = all.find('\n'); end != std::string::npos; start = end + 1, end = all.find('\n', start))
      rest->push_back(all.substr(start, end - start));
  }
  return header;
}

// The first key (depth-first) where two JSON values differ, as a path.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& at) {
  if (a.type() != b.type()) return at.empty() ? "/" : at;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key())) return at + "/" + it.key();
      const std::string d = first_difference(it.value(), b[it.key()], at + "/" + it.key());
      if (!d.empty()) return d;
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) return at + "/" + it.key();
    return {};
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return at;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string d = first_difference(a[i], b[i], at + "/" + std::to_string(i));
      if (!d.empty()) return d;
    }
    return {};
  }
  return a == b ? std::string() : (at.empty() ? "/" : at);
}

}  // namespace

std::optional<int> AuditJournal::recorded_batch(const std::string& path) {
  const auto header = read_header(path, nullptr);
  if (!header) return std::nullopt;
  return (*header)["batch"].get<int>();
}

AuditJournal::AuditJournal(std::string path, const nlohmann::ordered_json& identity, int batch) : path_(std::move(path)) {
  std::vector<std::string> lines;
  const auto header = read_header(path_, &lines);
  const nlohmann::json expected = nlohmann::json::parse(identity.dump());  // the same key order as a parsed header
  if (header) {
    const std::string d = first_difference(expected, (*header)["identity"], "");
    if (!d.empty())
      throw Error(path_ + ": this journal belongs to another audit (" + d +
                  " differs); delete it to start over, or rerun the command that wrote it");
    if ((*header)["batch"].get<int>() != batch)
      throw Error(path_ + ": its records were made at batch " + std::to_string((*header)["batch"].get<int>()) +
                  ", this audit runs batch " + std::to_string(batch) + "; delete it to start over");
    for (const auto& line : lines) {
      try {
        records_.push_back(nlohmann::json::parse(line));
      } catch (const nlohmann::json::exception&) {
        throw Error(path_ + ": record " + std::to_string(records_.size() + 1) + " is not JSON; delete the journal to start over");
      }
    }
    resumed_ = int(records_.size());
    // Appends go after the last complete line: a cut-short tail is dropped by rewriting the file.
    write_file_atomically(path_, [&](std::ostream& out) {
      out << header->dump() << '\n';
      for (const auto& r : records_) out << r.dump() << '\n';
    });
    open_for_appending();
  } else {
    // Written with the first record: an audit that fails before finishing anything leaves no journal.
    header_ = nlohmann::json{{"format", kJournalFormat}, {"identity", expected}, {"batch", batch}}.dump();
  }
}

void AuditJournal::open_for_appending() {
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr) throw Error(path_ + ": cannot open the audit journal for appending: " + std::strerror(errno));
}

AuditJournal::~AuditJournal() {
  if (file_ != nullptr) std::fclose(file_);
}

const nlohmann::json* AuditJournal::find(const std::string& kind, int w0) const {
  for (const auto& r : records_)
    if (r.value("kind", std::string()) == kind && (w0 < 0 || r.value("w0", -1) == w0)) return &r;
  return nullptr;
}

void AuditJournal::append(const nlohmann::json& record) {
  if (file_ == nullptr) {
    write_file_atomically(path_, [&](std::ostream& out) { out << header_ << '\n'; });
    open_for_appending();
  }
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0 || fsync(fileno(file_)) != 0)
    throw Error(path_ + ": cannot append to the audit journal: " + std::strerror(errno));
  records_.push_back(record);
}

void AuditJournal::remove() {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  std::remove(path_.c_str());
}

nlohmann::json doubles_to_bits(const double* values, size_t n) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) a.push_back(std::bit_cast<uint64_t>(values[i]));
  return a;
}

void bits_to_doubles(const nlohmann::json& bits, double* out, size_t n, const std::string& where) {
  if (!bits.is_array() || bits.size() != n)
    throw Error(where + ": expected " + std::to_string(n) + " values, found " +
                (bits.is_array() ? std::to_string(bits.size()) : std::string("no array")));
  for (size_t i = 0; i < n; ++i) {
    if (!bits[i].is_number_unsigned()) throw Error(where + ": value " + std::to_string(i) + " is not a bit pattern");
    out[i] = std::bit_cast<double>(bits[i].get<uint64_t>());
  }
}

}  // namespace fca
