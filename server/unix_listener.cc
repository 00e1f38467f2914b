#include "server/unix_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace spattn {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(const std::string& path,
                                                                  mode_t mode,
                                                                  grpc::Server* server) {
  sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path must have 1 to ", sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat(path, ": exists and is not a socket"));
    }
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live =
        probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (probe >= 0) close(probe);
    if (live) return absl::AlreadyExistsError(absl::StrCat(path, ": another process listens"));
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  // Created with the final permissions (no window where others could connect).
  const mode_t old_umask = umask(0777 & ~mode);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_umask);
  if (bound != 0 || chmod(path.c_str(), mode) != 0 || listen(fd, 128) != 0) {
    const absl::Status s = Errno(absl::StrCat("unix:", path));
    close(fd);
    return s;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const absl::Status s = Errno("pipe");
    close(fd);
    unlink(path.c_str());
    return s;
  }
  std::unique_ptr<UnixListener> l(new UnixListener(path, fd, pipe_fds[0], pipe_fds[1], server));
  l->thread_ = std::thread([p = l.get()] { p->Loop(); });
  return l;
}

UnixListener::UnixListener(std::string path, int fd, int wake_read, int wake_write,
                           grpc::Server* server)
    : path_(std::move(path)),
      fd_(fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      server_(server) {}

UnixListener::~UnixListener() {
  Stop();
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

void UnixListener::Stop() {
  if (stopped_.exchange(true)) return;
  const char b = 1;
  (void)!write(wake_write_, &b, 1);
  if (thread_.joinable()) thread_.join();
  unlink(path_.c_str());
}

void UnixListener::Loop() {
  while (!stopped_.load()) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, "unix_listener_failed", {{"error", strerror(errno)}});
      return;
    }
    if (fds[1].revents != 0 || stopped_.load()) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    // gRPC expects a non-blocking socket.
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      Log(LogLevel::kWarning, "unix_accept_failed", {{"error", strerror(errno)}});
      if (errno == EMFILE || errno == ENFILE) usleep(100 * 1000);
      continue;
    }
    // gRPC owns the connection from here (it closes it).
    grpc::AddInsecureChannelFromFd(server_, conn);
  }
}

}  // namespace spattn
