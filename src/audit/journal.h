// The audit's journal of finished work (docs/audit.md, "Resuming"): an append-only file of JSON
// lines in the output folder. Line 1 is a header naming what the work belongs to (the cache's
// identity, the conditions, repetitions, seed, build and batch); every later line is one record
// (exact replay once it has passed, then one per finished window batch of condition replays),
// written whole and flushed to disk before the audit goes on. A killed audit restarted with the
// same command reads the complete records back and recomputes only what is missing; a last line cut
// short by the kill is ignored. The audit removes the journal once its results are written.
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace fca {

inline constexpr const char* kJournalFormat = "fca-audit-journal-v2";

class AuditJournal {
 public:
  // Opens `path`: an existing journal must carry `identity` (else Error naming the first field that
  // differs, and how to start over); its complete records are read. A missing one is created with
  // the header {format, identity, batch} when the first record is appended.
  AuditJournal(std::string path, const nlohmann::ordered_json& identity, int batch);
  ~AuditJournal();
  AuditJournal(const AuditJournal&) = delete;
  AuditJournal& operator=(const AuditJournal&) = delete;

  // The batch recorded in an existing journal's header, if `path` holds one (read before the audit
  // chooses a batch, so that a resumed audit keeps the batch its records were made with).
  static std::optional<int> recorded_batch(const std::string& path);

  const std::vector<nlohmann::json>& records() const { return records_; }
  // The first record whose "kind" is `kind` (and, when given, whose "w0" is `w0`), or null.
  const nlohmann::json* find(const std::string& kind, int w0 = -1) const;
  // Appends one record as a line and flushes it to disk (fsync) before returning.
  void append(const nlohmann::json& record);
  // Deletes the file (the audit's results are written).
  void remove();
  int resumed_records() const { return resumed_; }

 private:
  void open_for_appending();
  std::string path_;
  std::string header_;  // of a journal not yet on disk
  std::FILE* file_ = nullptr;
  std::vector<nlohmann::json> records_;
  int resumed_ = 0;
};

// Exact storage of doubles in JSON (NaN and infinities included): their IEEE bit patterns.
nlohmann::json doubles_to_bits(const double* values, size_t n);
void bits_to_doubles(const nlohmann::json& bits, double* out, size_t n, const std::string& where);

}  // namespace fca
