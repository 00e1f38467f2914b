// Transport security and caller identity shared by both servers and every client:
// * TLS / mTLS credentials from PEM files (server: certificate + key, optionally a CA that client
//   certificates must chain to, optional or required; client: a CA to verify the server, and
//   optionally its own certificate + key for mTLS);
// * bearer tokens: clients send `authorization: Bearer <token>` on every call (an interceptor, so
//   it also works on plaintext channels and Unix sockets); servers map tokens and mTLS identities
//   to a role (read or write) through an auth file;
// * the caller's identity on the server: token name, certificate identity, or, for connections
//   the worker accepted on its Unix socket, the peer's uid (SO_PEERCRED).
#ifndef SPATTN_PROTO_GRPC_SECURITY_H_
#define SPATTN_PROTO_GRPC_SECURITY_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spattn {

// Server side TLS. Without cert_file the server listens in plaintext.
struct ServerTlsOptions {
  std::string cert_file;  // PEM certificate chain of the server.
  std::string key_file;   // PEM private key of the server.
  // PEM CA bundle client certificates must chain to; "" = clients send no certificate.
  std::string ca_file;
  // With ca_file: refuse clients without a valid certificate (mTLS required). Otherwise a
  // certificate is requested and verified when sent, and callers without one authenticate with
  // a bearer token. Default: false.
  bool require_client_cert = false;
};

// Client side security. Without ca_file (and use_tls false) the channel is plaintext.
struct ClientSecurityOptions {
  bool use_tls = false;   // TLS with the system roots when ca_file is empty.
  std::string ca_file;    // PEM CA bundle that verifies the server (implies use_tls).
  std::string cert_file;  // mTLS: the client's PEM certificate chain.
  std::string key_file;   // mTLS: the client's PEM private key.
  // Overrides the name checked against the server certificate (tests, IP addresses).
  std::string server_name_override;
  std::string bearer_token;  // Sent as `authorization: Bearer <token>` on every call.
};

absl::StatusOr<std::string> ReadSmallFile(const std::string& path);

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurityOptions& options);
// A channel to `target` ("host:port" or "unix:/path") with `options`' credentials and token.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ClientSecurityOptions& options,
                                                           grpc::ChannelArguments args = {});
// The token of a token file (first line, whitespace trimmed); "" when path is "".
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);
// Client options from command-line values (--tls_ca, --tls_cert, --tls_key, --tls_server_name,
// --token_file); empty values are unset.
absl::StatusOr<ClientSecurityOptions> ClientSecurityFromFlags(const std::string& ca,
                                                              const std::string& cert,
                                                              const std::string& key,
                                                              const std::string& server_name,
                                                              const std::string& token_file);

enum class Role { kNone = 0, kRead = 1, kWrite = 2 };
const char* RoleName(Role role);

// Who is calling, as far as the server can tell.
struct Caller {
  // Scope of what the caller registers: "token:NAME", "cert:ID", "uid:N" (Unix socket) or
  // "peer:ADDRESS" (anonymous TCP: one connection).
  std::string principal;
  Role role = Role::kNone;     // From a token or a certificate identity.
  bool authenticated = false;  // A known token or a listed certificate identity.
  bool bad_token = false;      // A bearer token was sent and is not known.
  bool unix_peer = false;      // Connected through the worker's Unix socket.
  int64_t uid = -1;            // The Unix peer's uid (SO_PEERCRED).
  int64_t pid = -1;
};

// Tokens and certificate identities with their roles. Auth file format, one entry a line,
// '#' comments:
//   token <secret> <role> <name>     e.g. `token 3f9c... write calibrator`
//   cert <identity> <role>           an mTLS identity (a SAN DNS/URI name or the subject CN),
//                                    `*` = any certificate the CA verified
// with role `read` (fetch, watch, list, attention with inline/own tensors) or `write`
// (everything). File permissions must not let others read it (mode 0600 or 0640).
struct AuthConfig {
  struct Token {
    std::string secret;
    Role role = Role::kNone;
    std::string name;
  };
  std::vector<Token> tokens;
  std::map<std::string, Role> certs;
  bool enabled() const { return !tokens.empty() || !certs.empty(); }
};

absl::StatusOr<AuthConfig> ParseAuthConfig(const std::string& text);
absl::StatusOr<AuthConfig> LoadAuthFile(const std::string& path);

// Thread-safe after construction.
class Authorizer {
 public:
  Authorizer() = default;  // Disabled: every check passes.
  explicit Authorizer(AuthConfig config) : config_(std::move(config)) {}

  bool enabled() const { return config_.enabled(); }
  // The caller of `ctx`: bearer token, certificate identity, Unix peer credentials, peer address.
  Caller Identify(const grpc::ServerContextBase& ctx) const;
  // OK when authorization is off or the caller's role reaches `need`; UNAUTHENTICATED without a
  // (valid) credential, PERMISSION_DENIED with a credential whose role is too low.
  absl::Status Check(const Caller& caller, Role need, const std::string& what) const;

 private:
  AuthConfig config_;
};

// The peer credentials of a connection the worker accepted on its Unix socket and handed to
// gRPC (its peer string is "fd:N"): false for any other peer.
bool UnixPeerCredentials(const std::string& grpc_peer, int64_t* uid, int64_t* pid);

}  // namespace spattn

#endif  // SPATTN_PROTO_GRPC_SECURITY_H_
