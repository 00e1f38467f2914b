#include "proto/grpc_security.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace spattn {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";

// Adds `authorization: Bearer <token>` to every call of a channel.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthorization, *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerFactory(std::string token) : header_(absl::StrCat(kBearer, token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(&header_);
  }

 private:
  const std::string header_;  // Lives as long as the channel (which owns the factory).
};

// Comparison whose time does not depend on where the strings differ.
bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::StatusOr<Role> ParseRole(absl::string_view s) {
  if (s == "read") return Role::kRead;
  if (s == "write") return Role::kWrite;
  return absl::InvalidArgumentError(absl::StrCat("role '", s, "': expected read or write"));
}

}  // namespace

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB"));
  }
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& o) {
  if (o.cert_file.empty() && o.key_file.empty()) {
    if (!o.ca_file.empty() || o.require_client_cert) {
      return absl::InvalidArgumentError("tls_ca / client certificates need tls_cert and tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.cert_file.empty() || o.key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key go together");
  }
  if (o.require_client_cert && o.ca_file.empty()) {
    return absl::InvalidArgumentError("requiring client certificates needs tls_ca");
  }
  grpc::SslServerCredentialsOptions ssl(
      o.ca_file.empty()       ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
      : o.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                              : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto cert = ReadSmallFile(o.cert_file);
  if (!cert.ok())
    return absl::InvalidArgumentError(absl::StrCat("tls_cert: ", cert.status().message()));
  auto key = ReadSmallFile(o.key_file);
  if (!key.ok())
    return absl::InvalidArgumentError(absl::StrCat("tls_key: ", key.status().message()));
  pair.cert_chain = *cert;
  pair.private_key = *key;
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!o.ca_file.empty()) {
    auto ca = ReadSmallFile(o.ca_file);
    if (!ca.ok())
      return absl::InvalidArgumentError(absl::StrCat("tls_ca: ", ca.status().message()));
    ssl.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurityOptions& o) {
  if (!o.use_tls && o.ca_file.empty()) {
    if (!o.cert_file.empty() || !o.key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs TLS (tls_ca)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key go together");
  }
  grpc::SslCredentialsOptions ssl;
  if (!o.ca_file.empty()) {
    auto ca = ReadSmallFile(o.ca_file);
    if (!ca.ok())
      return absl::InvalidArgumentError(absl::StrCat("tls_ca: ", ca.status().message()));
    ssl.pem_root_certs = *ca;
  }
  if (!o.cert_file.empty()) {
    auto cert = ReadSmallFile(o.cert_file);
    if (!cert.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tls_cert: ", cert.status().message()));
    }
    auto key = ReadSmallFile(o.key_file);
    if (!key.ok())
      return absl::InvalidArgumentError(absl::StrCat("tls_key: ", key.status().message()));
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ClientSecurityOptions& o,
                                                           grpc::ChannelArguments args) {
  auto creds = MakeChannelCredentials(o);
  if (!creds.ok()) return creds.status();
  if (!o.server_name_override.empty()) {
    args.SetSslTargetNameOverride(o.server_name_override);
  }
  if (o.bearer_token.empty()) return grpc::CreateCustomChannel(target, *creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerFactory>(o.bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, *creds, args,
                                                                 std::move(factories));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) return std::string();
  auto text = ReadSmallFile(path);
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no token"));
  return token;
}

absl::StatusOr<ClientSecurityOptions> ClientSecurityFromFlags(const std::string& ca,
                                                              const std::string& cert,
                                                              const std::string& key,
                                                              const std::string& server_name,
                                                              const std::string& token_file) {
  ClientSecurityOptions o;
  o.ca_file = ca;
  o.cert_file = cert;
  o.key_file = key;
  o.server_name_override = server_name;
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) return token.status();
  o.bearer_token = *token;
  // Validate the combination now (a clear error before any call).
  auto creds = MakeChannelCredentials(o);
  if (!creds.ok()) return creds.status();
  return o;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kWrite:
      return "write";
    case Role::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<AuthConfig> ParseAuthConfig(const std::string& text) {
  AuthConfig config;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++n;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [n](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("auth file line ", n, ": ", why));
    };
    if (f[0] == "token") {
      if (f.size() != 4) return bad("expected 'token <secret> <role> <name>'");
      auto role = ParseRole(f[2]);
      if (!role.ok()) return bad(std::string(role.status().message()));
      if (f[1].size() < 16) return bad("tokens must be at least 16 characters");
      for (const AuthConfig::Token& t : config.tokens) {
        if (t.secret == f[1]) return bad("duplicate token");
      }
      config.tokens.push_back({std::string(f[1]), *role, std::string(f[3])});
    } else if (f[0] == "cert") {
      if (f.size() != 3) return bad("expected 'cert <identity> <role>'");
      auto role = ParseRole(f[2]);
      if (!role.ok()) return bad(std::string(role.status().message()));
      config.certs[std::string(f[1])] = *role;
    } else {
      return bad(absl::StrCat("unknown entry '", f[0], "' (expected token or cert)"));
    }
  }
  return config;
}

absl::StatusOr<AuthConfig> LoadAuthFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("auth file ", path, ": cannot stat"));
  }
  if ((st.st_mode & S_IROTH) != 0 || (st.st_mode & S_IWOTH) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("auth file ", path, ": readable or writable by others (chmod 600 or 640 it)"));
  }
  auto text = ReadSmallFile(path);
  if (!text.ok()) return text.status();
  return ParseAuthConfig(*text);
}

bool UnixPeerCredentials(const std::string& grpc_peer, int64_t* uid, int64_t* pid) {
  // Connections handed to gRPC with AddInsecureChannelFromFd are named "fd:N".
  absl::string_view p = grpc_peer;
  if (!absl::ConsumePrefix(&p, "fd:")) return false;
  int fd = -1;
  if (!absl::SimpleAtoi(p, &fd) || fd < 0) return false;
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) return false;
  struct ucred cred;
  len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  *uid = cred.uid;
  *pid = cred.pid;
  return true;
}

Caller Authorizer::Identify(const grpc::ServerContextBase& ctx) const {
  Caller c;
  const std::string peer = ctx.peer();
  c.unix_peer = UnixPeerCredentials(peer, &c.uid, &c.pid);
  c.principal = c.unix_peer ? absl::StrCat("uid:", c.uid) : absl::StrCat("peer:", peer);
  if (!enabled()) return c;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kAuthorization);
  if (it != md.end()) {
    absl::string_view v(it->second.data(), it->second.size());
    std::string token;
    if (absl::ConsumePrefix(&v, kBearer)) token = std::string(absl::StripAsciiWhitespace(v));
    const AuthConfig::Token* found = nullptr;
    for (const AuthConfig::Token& t : config_.tokens) {
      if (ConstantTimeEqual(t.secret, token)) found = &t;
    }
    if (found == nullptr) {
      c.bad_token = true;
      return c;
    }
    c.authenticated = true;
    c.role = found->role;
    c.principal = absl::StrCat("token:", found->name);
    return c;
  }
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated() && !config_.certs.empty()) {
    std::vector<std::string> ids;
    for (const char* prop : {"x509_subject_alternative_name", "x509_common_name"}) {
      for (const grpc::string_ref& v : auth->FindPropertyValues(prop)) {
        ids.emplace_back(v.data(), v.size());
      }
    }
    for (const std::string& id : ids) {
      auto e = config_.certs.find(id);
      if (e != config_.certs.end() && e->second > c.role) {
        c.role = e->second;
        c.principal = absl::StrCat("cert:", id);
        c.authenticated = true;
      }
    }
    auto any = config_.certs.find("*");
    if (!c.authenticated && any != config_.certs.end() && !ids.empty()) {
      c.role = any->second;
      c.principal = absl::StrCat("cert:", ids.front());
      c.authenticated = true;
    }
  }
  return c;
}

absl::Status Authorizer::Check(const Caller& caller, Role need, const std::string& what) const {
  if (!enabled()) return absl::OkStatus();
  if (caller.bad_token) {
    return absl::UnauthenticatedError(absl::StrCat(what, ": the bearer token is not valid"));
  }
  if (!caller.authenticated) {
    return absl::UnauthenticatedError(absl::StrCat(
        what, ": needs a bearer token or a client certificate with the ", RoleName(need), " role"));
  }
  if (caller.role < need) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": needs the ", RoleName(need), " role; ",
                                                    caller.principal, " has ",
                                                    RoleName(caller.role)));
  }
  return absl::OkStatus();
}

}  // namespace spattn
