// Accepts connections on a Unix domain socket and hands each to a running gRPC server
// (AddInsecureChannelFromFd). gRPC names such a connection's peer "fd:N", so handlers can read
// the connecting process's uid/pid with SO_PEERCRED (UnixPeerCredentials in
// proto/grpc_security.h) — which gRPC's own "unix:" listener does not expose.
#ifndef SPATTN_SERVER_UNIX_LISTENER_H_
#define SPATTN_SERVER_UNIX_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace spattn {

class UnixListener {
 public:
  // Binds `path` (a stale socket file left by a dead process is replaced; a live one is
  // ALREADY_EXISTS) with permissions `mode`, and accepts until Stop().
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(const std::string& path, mode_t mode,
                                                             grpc::Server* server);
  ~UnixListener();  // Stop().
  // Stops accepting and removes the socket file. Open connections stay with gRPC.
  void Stop();
  const std::string& path() const { return path_; }

 private:
  UnixListener(std::string path, int fd, int wake_read, int wake_write, grpc::Server* server);
  void Loop();

  const std::string path_;
  const int fd_;
  const int wake_read_;
  const int wake_write_;
  grpc::Server* const server_;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_UNIX_LISTENER_H_
