#include "core/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/parse.h"

extern char** environ;

namespace fca {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<long long>(left, 1 << 30));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// A timeout beyond 1e6 s (as a library caller might pass) would overflow the clock arithmetic:
// refused, naming the value.
Clock::time_point deadline_after(double seconds) {
  if (!(seconds > 0 && seconds <= 1e6))
    throw Error("a child process's timeout of " + number_text(seconds) + " s is outside (0, 1e6] s");
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

}  // namespace

ChildProcess::ChildProcess(const std::string& command) : command_(command), label_("`" + command + "`") {
  // A write to a child that has exited must come back as EPIPE, not end fca with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw Error("cannot create a pipe for `" + command + "`: " + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    throw Error("cannot create a pipe for `" + command + "`: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);   // dup2 clears O_CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  const int rc = posix_spawn(&pid_, "/bin/sh", &actions, &attributes, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(in[0]);
  ::close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  if (rc != 0) {
    ::close(to_child_);
    ::close(from_child_);
    throw Error("cannot start `" + command + "` (/bin/sh -c): " + std::strerror(rc));
  }
  ::fcntl(to_child_, F_SETFL, ::fcntl(to_child_, F_GETFL) | O_NONBLOCK);
  ::fcntl(from_child_, F_SETFL, ::fcntl(from_child_, F_GETFL) | O_NONBLOCK);
}

ChildProcess::~ChildProcess() {
  if (to_child_ >= 0) ::close(to_child_);
  if (!reaped_ && !hung_) {
    const auto deadline = deadline_after(5.0);
    while (!reaped_ && Clock::now() < deadline) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ::kill(-pid_, SIGKILL);  // the group: a shell's children too
  if (!reaped_) ::waitpid(pid_, &status_, 0);
  if (from_child_ >= 0) ::close(from_child_);
}

std::string ChildProcess::exit_description() {
  // The child closed its end; give it a moment to finish exiting so that its status is known.
  const auto deadline = deadline_after(2.0);
  while (!reaped_ && Clock::now() < deadline) {
    if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!reaped_) return "closed its end of the pipe";
  if (WIFEXITED(status_)) return "exited with status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) return "was killed by signal " + std::to_string(WTERMSIG(status_));
  return "ended";
}

void ChildProcess::write_all(const void* data, size_t n, double timeout_s, const std::string& what) {
  const auto deadline = deadline_after(timeout_s);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(to_child_, p, n);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EPIPE)
      throw Error(label_ + " " + exit_description() + " while fca was sending " + what);
    if (w < 0 && errno != EAGAIN) throw Error("writing " + what + " to " + label_ + ": " + std::strerror(errno));
    pollfd fd{to_child_, POLLOUT, 0};
    const int ms = remaining_ms(deadline);
    if (ms == 0 || ::poll(&fd, 1, ms) == 0) {
      hung_ = true;
      throw Error(label_ + " did not take " + what + " within " + seconds_text(timeout_s) +
                  " (hung? see --external-timeout)");
    }
  }
}

void ChildProcess::read_exact(void* data, size_t n, double timeout_s, const std::string& what) {
  const auto deadline = deadline_after(timeout_s);
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(from_child_, p, n);
    if (r > 0) {
      p += r;
      n -= size_t(r);
      continue;
    }
    if (r == 0) throw Error(label_ + " " + exit_description() + " before sending " + what + " (its stderr is above)");
    if (errno == EINTR) continue;
    if (errno != EAGAIN) throw Error("reading " + what + " from " + label_ + ": " + std::strerror(errno));
    pollfd fd{from_child_, POLLIN, 0};
    const int ms = remaining_ms(deadline);
    if (ms == 0 || ::poll(&fd, 1, ms) == 0) {
      hung_ = true;
      throw Error(label_ + " did not send " + what + " within " + seconds_text(timeout_s) +
                  " (hung? see --external-timeout)");
    }
  }
}

std::string run_to_exit(const std::string& command) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start `" + command + "`: " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("cannot wait for `" + command + "`: " + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 ? "" : "exited with status " + std::to_string(WEXITSTATUS(status));
  return "was killed by signal " + std::to_string(WTERMSIG(status));
}

std::string shell_word(const std::string& text) {
  std::string word = "'";
  for (char c : text) word += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return word + "'";
}

}  // namespace fca
