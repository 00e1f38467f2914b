#include "index/record_codec.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "index/crc32c.h"

namespace spattn {
namespace {

constexpr char kMagic[4] = {'S', 'P', 'X', '1'};
constexpr size_t kFixed = sizeof(kMagic) + 4 + 4;  // magic, header length, crc32c.

void PutU32(std::string* out, uint32_t v) {
  char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
               static_cast<char>(v >> 24)};
  out->append(b, 4);
}

uint32_t GetU32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

}  // namespace

std::string EncodeRecord(const google::protobuf::MessageLite& header, absl::string_view payload) {
  std::string header_bytes = header.SerializeAsString();
  std::string out;
  out.reserve(kFixed + header_bytes.size() + payload.size());
  out.append(kMagic, sizeof(kMagic));
  PutU32(&out, static_cast<uint32_t>(header_bytes.size()));
  out.append(header_bytes);
  out.append(payload.data(), payload.size());
  PutU32(&out, Crc32c(out));
  return out;
}

absl::Status DecodeRecord(absl::string_view value, absl::string_view what,
                          google::protobuf::MessageLite* header, absl::string_view* payload) {
  if (value.size() < kFixed || std::memcmp(value.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(what, ": stored value is not a spattn record"));
  }
  const size_t body = value.size() - 4;
  const uint32_t stored_crc = GetU32(value.data() + body);
  if (Crc32c(value.data(), body) != stored_crc) {
    return absl::DataLossError(absl::StrCat(what, ": crc32c mismatch in stored value"));
  }
  const uint32_t header_len = GetU32(value.data() + sizeof(kMagic));
  const size_t header_start = sizeof(kMagic) + 4;
  if (header_len > body - header_start) {
    return absl::DataLossError(absl::StrCat(what, ": stored header length out of range"));
  }
  if (!header->ParseFromArray(value.data() + header_start, static_cast<int>(header_len))) {
    return absl::DataLossError(absl::StrCat(what, ": stored header does not parse"));
  }
  if (payload != nullptr) {
    *payload = value.substr(header_start + header_len, body - header_start - header_len);
  }
  return absl::OkStatus();
}

}  // namespace spattn
