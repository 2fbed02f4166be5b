// A child process started through /bin/sh -c, with pipes on its stdin and stdout (its stderr is
// fca's, so what it prints reaches the user). Reads and writes take a time limit, so a silent or
// hung child is an Error rather than a hang; a child that exits is an Error naming its exit status.
// The child runs in its own process group, and the destructor ends the whole group.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <utility>

namespace fca {

class ChildProcess {
 public:
  // Starts `command`; throws Error naming it when it cannot be started.
  explicit ChildProcess(const std::string& command);
  // Closes the child's stdin (its signal to finish), waits up to 5 s, then kills the group.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Writes all `n` bytes within timeout_s seconds; `what` names the message in errors.
  void write_all(const void* data, size_t n, double timeout_s, const std::string& what);
  // Reads exactly `n` bytes within timeout_s seconds (from the call).
  void read_exact(void* data, size_t n, double timeout_s, const std::string& what);
  const std::string& command() const { return command_; }
  // How errors name the child: "`<command>`" until set_label gives a better name (an adapter's own
  // name once it has described itself: its command may be a relay of no meaning to the user).
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }

 private:
  // "exited with status 1", "was killed by signal 9", or "closed its output" when still running.
  std::string exit_description();
  std::string command_, label_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  bool reaped_ = false;
  bool hung_ = false;  // a read or write timed out: no grace period at the end
  int status_ = 0;
};

// Runs `command` through /bin/sh -c to its end, its stdout sent to fca's stderr (so that a child's
// progress reaches the user and fca's stdout stays its own), and returns how it ended: "" when it
// exited with status 0, else "exited with status N" or "was killed by signal N". Throws Error naming
// the command when it cannot be started.
std::string run_to_exit(const std::string& command);

// `text` as one word of a /bin/sh command line (single-quoted, with ' written as '\'').
std::string shell_word(const std::string& text);

}  // namespace fca
