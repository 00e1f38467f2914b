#include "index/npy_fp32.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace spattn {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// The value text after `'key':` in the header dict, up to the next top-level ',' or '}'.
absl::StatusOr<std::string> DictValue(absl::string_view header, absl::string_view key) {
  const std::string quoted[] = {absl::StrCat("'", key, "'"), absl::StrCat("\"", key, "\"")};
  size_t pos = absl::string_view::npos;
  for (const std::string& q : quoted) {
    pos = header.find(q);
    if (pos != absl::string_view::npos) {
      pos += q.size();
      break;
    }
  }
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header has no '", key, "'"));
  }
  pos = header.find(':', pos);
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header '", key, "' has no value"));
  }
  ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return std::string(absl::StripAsciiWhitespace(header.substr(pos, end - pos)));
}

}  // namespace

absl::StatusOr<NpyFp32> ParseNpyFp32(absl::string_view file) {
  if (file.size() < kMagicLen + 4 || file.substr(0, kMagicLen) != absl::string_view(kMagic, 6)) {
    return absl::InvalidArgumentError("npy: not a .npy file (bad magic)");
  }
  const auto* u = reinterpret_cast<const unsigned char*>(file.data());
  const int major = u[6];
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = u[8] | (size_t{u[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return absl::InvalidArgumentError("npy: truncated header");
    header_len = u[8] | (size_t{u[9]} << 8) | (size_t{u[10]} << 16) | (size_t{u[11]} << 24);
    header_start = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("npy: unsupported format version ", major));
  }
  if (header_start + header_len > file.size()) {
    return absl::InvalidArgumentError("npy: truncated header");
  }
  const absl::string_view header = file.substr(header_start, header_len);
  absl::StatusOr<std::string> descr = DictValue(header, "descr");
  if (!descr.ok()) return descr.status();
  std::string d = std::string(absl::StripPrefix(absl::StripSuffix(*descr, "'"), "'"));
  d = std::string(absl::StripPrefix(absl::StripSuffix(d, "\""), "\""));
  if (d != "<f4" && d != "f4" && d != "=f4") {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: dtype must be little-endian float32 ('<f4'), got '", d,
                     "'; convert with arr.astype(np.float32)"));
  }
  absl::StatusOr<std::string> fortran = DictValue(header, "fortran_order");
  if (!fortran.ok()) return fortran.status();
  if (*fortran != "False") {
    return absl::InvalidArgumentError(
        "npy: fortran_order arrays are not supported; save np.ascontiguousarray(arr)");
  }
  absl::StatusOr<std::string> shape_text = DictValue(header, "shape");
  if (!shape_text.ok()) return shape_text.status();
  absl::string_view s = *shape_text;
  if (!absl::ConsumePrefix(&s, "(") || !absl::ConsumeSuffix(&s, ")")) {
    return absl::InvalidArgumentError("npy: shape is not a tuple");
  }
  NpyFp32 out;
  uint64_t elements = 1;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int64_t dim;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0) {
      return absl::InvalidArgumentError("npy: shape has a bad dimension");
    }
    out.shape.push_back(dim);
    elements *= static_cast<uint64_t>(dim);
  }
  const size_t data_start = header_start + header_len;
  if (file.size() - data_start != elements * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy: shape needs ", elements * 4, " data bytes, file has ", file.size() - data_start));
  }
  out.bytes = std::string(file.substr(data_start));
  return out;
}

absl::StatusOr<NpyFp32> ReadNpyFp32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<NpyFp32> parsed = ParseNpyFp32(buf.str());
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path, ": ", parsed.status().message()));
  }
  return parsed;
}

std::string EncodeNpyFp32(const std::vector<int64_t>& shape, absl::string_view bytes) {
  std::string shape_text = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) shape_text += ",";
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", shape_text, "), }");
  // Pad with spaces so the data starts 64-byte aligned; the header ends with '\n'.
  size_t prefix = kMagicLen + 2 + 2;
  bool v2 = false;
  size_t total = prefix + header.size() + 1;
  if ((total + 63) / 64 * 64 - prefix > 65535) {
    v2 = true;
    prefix += 2;
    total = prefix + header.size() + 1;
  }
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  const size_t len = header.size();
  out.push_back(static_cast<char>(len & 0xFF));
  out.push_back(static_cast<char>((len >> 8) & 0xFF));
  if (v2) {
    out.push_back(static_cast<char>((len >> 16) & 0xFF));
    out.push_back(static_cast<char>((len >> 24) & 0xFF));
  }
  out.append(header);
  out.append(bytes.data(), bytes.size());
  return out;
}

absl::Status WriteNpyFp32(const std::string& path, const std::vector<int64_t>& shape,
                          absl::string_view bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
    const std::string encoded = EncodeNpyFp32(shape, bytes);
    out.write(encoded.data(), static_cast<std::streamsize>(encoded.size()));
    if (!out) return absl::DataLossError(absl::StrCat("writing '", path, "' failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot rename onto '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace spattn
