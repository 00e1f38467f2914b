#include "kernels/io/tensor_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace spattn {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicLen = 6;
// numpy refuses headers above 10000 bytes by default; real ones are ~100 bytes. We allow more
// (long shapes) but refuse absurd lengths before allocating anything.
constexpr uint64_t kMaxNpyHeader = 1 << 16;
// The safetensors reference implementation caps its JSON header at 100 MB.
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;
constexpr int kMaxJsonDepth = 64;

absl::Status Bad(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

uint64_t ReadLe(const char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void AppendLe(uint64_t v, int n, std::string* out) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Product of dims, or an error when a dim is negative or the product overflows int64.
absl::StatusOr<int64_t> NumElements(const std::vector<int64_t>& shape, absl::string_view source) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Bad(source, absl::StrCat("shape has a negative dimension ", d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) {
      return Bad(source, "shape is too large (element count overflows)");
    }
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Checks that `avail` data bytes hold exactly shape x dtype.
absl::Status CheckDataSize(const std::vector<int64_t>& shape, DType dtype, uint64_t avail,
                           absl::string_view source, absl::string_view what) {
  auto n = NumElements(shape, source);
  if (!n.ok()) return n.status();
  const uint64_t need = static_cast<uint64_t>(*n) * DTypeSize(dtype);
  if (avail < need) {
    return Bad(source,
               absl::StrCat(what, "truncated: shape ", ShapeString(shape), " of ", DTypeName(dtype),
                            " needs ", need, " data bytes, only ", avail, " present"));
  }
  if (avail > need) {
    return Bad(source, absl::StrCat(what, "shape ", ShapeString(shape), " of ", DTypeName(dtype),
                                    " needs ", need, " data bytes but ", avail, " are present (",
                                    avail - need, " extra)"));
  }
  return absl::OkStatus();
}

// ---- The Python-literal subset of .npy headers: {'key': value, ...} with string, bool and
// tuple-of-int values.
class PyLiteralParser {
 public:
  PyLiteralParser(absl::string_view text, absl::string_view source) : t_(text), source_(source) {}

  struct Header {
    bool has_descr = false, has_fortran = false, has_shape = false;
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  absl::StatusOr<Header> Parse() {
    Header h;
    Skip();
    if (!Eat('{')) return Err("header is not a Python dict (no '{')");
    Skip();
    while (!Eat('}')) {
      std::string key;
      if (!ParseString(&key)) return Err("header dict key is not a string");
      Skip();
      if (!Eat(':')) return Err(absl::StrCat("header: no ':' after key '", key, "'"));
      Skip();
      if (key == "descr") {
        if (h.has_descr) return Err("header repeats 'descr'");
        h.has_descr = true;
        if (!ParseString(&h.descr)) {
          return Err("header 'descr' is not a string (structured dtypes are not supported)");
        }
      } else if (key == "fortran_order") {
        if (h.has_fortran) return Err("header repeats 'fortran_order'");
        h.has_fortran = true;
        if (Word("True")) {
          h.fortran_order = true;
        } else if (Word("False")) {
          h.fortran_order = false;
        } else {
          return Err("header 'fortran_order' is not True or False");
        }
      } else if (key == "shape") {
        if (h.has_shape) return Err("header repeats 'shape'");
        h.has_shape = true;
        absl::Status s = ParseShape(&h.shape);
        if (!s.ok()) return s;
      } else {
        return Err(absl::StrCat("header has an unexpected key '", key, "'"));
      }
      Skip();
      if (Eat(',')) {
        Skip();
        continue;
      }
      Skip();
      if (Peek() != '}') return Err("header dict: expected ',' or '}'");
    }
    Skip();
    if (pos_ != t_.size()) return Err("header has text after the dict");
    if (!h.has_descr) return Err("header lacks 'descr'");
    if (!h.has_fortran) return Err("header lacks 'fortran_order'");
    if (!h.has_shape) return Err("header lacks 'shape'");
    return h;
  }

 private:
  absl::Status Err(absl::string_view what) const { return Bad(source_, what); }
  char Peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c || pos_ >= t_.size()) return false;
    ++pos_;
    return true;
  }
  void Skip() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Word(absl::string_view w) {
    if (t_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool ParseString(std::string* out) {
    const char q = Peek();
    if (q != '\'' && q != '"') return false;
    ++pos_;
    out->clear();
    while (pos_ < t_.size() && t_[pos_] != q) {
      if (t_[pos_] == '\\') return false;  // No escapes in the strings numpy writes.
      out->push_back(t_[pos_++]);
    }
    return Eat(q);
  }
  absl::Status ParseShape(std::vector<int64_t>* shape) {
    const char open = Peek();
    if (open != '(' && open != '[') return Err("header 'shape' is not a tuple");
    const char close = open == '(' ? ')' : ']';
    ++pos_;
    Skip();
    while (!Eat(close)) {
      if (!absl::ascii_isdigit(Peek())) return Err("header 'shape' has a non-integer entry");
      int64_t v = 0;
      while (absl::ascii_isdigit(Peek())) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) {
          return Err("header 'shape' entry is too large");
        }
        v = v * 10 + (t_[pos_++] - '0');
      }
      Eat('L');  // Python 2 long suffix.
      shape->push_back(v);
      Skip();
      if (Eat(',')) {
        Skip();
        continue;
      }
      if (Peek() != close) return Err("header 'shape': expected ',' or the closing bracket");
    }
    return absl::OkStatus();
  }

  absl::string_view t_;
  absl::string_view source_;
  size_t pos_ = 0;
};

absl::StatusOr<DType> NpyDescrToDType(const std::string& descr, absl::string_view source) {
  if (descr == "<f4") return DType::kF32;
  if (descr == "<f2") return DType::kF16;
  if (descr == "bfloat16" || descr == "<V2" || descr == "|V2" || descr == "<u2" || descr == "<i2") {
    return DType::kBF16;
  }
  std::string why;
  if (!descr.empty() && descr[0] == '>') why = " (big-endian)";
  return Bad(source, absl::StrCat("unsupported dtype '", descr, "'", why,
                                  "; expected '<f4', '<f2' or bf16 as 'bfloat16', '<V2', '|V2', "
                                  "'<u2' or '<i2'"));
}

const char* NpyDescr(DType t) {
  switch (t) {
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kBF16:
      return "<u2";
  }
  return "?";
}

// ---- A small JSON reader, enough for safetensors headers.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = kNull;
  bool boolean = false;
  std::string text;  // number text or string value
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
};

class JsonParser {
 public:
  JsonParser(absl::string_view text, absl::string_view source) : t_(text), source_(source) {}

  absl::StatusOr<Json> ParseDocument() {
    Json v;
    absl::Status s = ParseValue(&v, 0);
    if (!s.ok()) return s;
    Skip();
    if (pos_ != t_.size()) return Err("text after the JSON value");
    return v;
  }

 private:
  absl::Status Err(absl::string_view what) const {
    return Bad(source_, absl::StrCat("header JSON: ", what, " at byte ", pos_));
  }
  char Peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  void Skip() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Word(absl::string_view w) {
    if (t_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  absl::Status ParseValue(Json* v, int depth) {
    if (depth > kMaxJsonDepth) return Err("nested too deeply");
    Skip();
    if (pos_ >= t_.size()) return Err("unexpected end");
    const char c = t_[pos_];
    if (c == '{') return ParseObject(v, depth);
    if (c == '[') return ParseArray(v, depth);
    if (c == '"') {
      v->kind = Json::kString;
      return ParseString(&v->text);
    }
    if (Word("true")) {
      v->kind = Json::kBool;
      v->boolean = true;
      return absl::OkStatus();
    }
    if (Word("false")) {
      v->kind = Json::kBool;
      return absl::OkStatus();
    }
    if (Word("null")) {
      v->kind = Json::kNull;
      return absl::OkStatus();
    }
    if (c == '-' || absl::ascii_isdigit(c)) {
      v->kind = Json::kNumber;
      const size_t start = pos_;
      if (Peek() == '-') ++pos_;
      while (pos_ < t_.size() &&
             (absl::ascii_isdigit(t_[pos_]) || t_[pos_] == '.' || t_[pos_] == 'e' ||
              t_[pos_] == 'E' || t_[pos_] == '+' || t_[pos_] == '-')) {
        ++pos_;
      }
      v->text = std::string(t_.substr(start, pos_ - start));
      return absl::OkStatus();
    }
    return Err(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status ParseObject(Json* v, int depth) {
    v->kind = Json::kObject;
    ++pos_;  // '{'
    Skip();
    if (Peek() == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      Skip();
      if (Peek() != '"') return Err("object key is not a string");
      std::string key;
      absl::Status s = ParseString(&key);
      if (!s.ok()) return s;
      for (const auto& m : v->members) {
        if (m.first == key) return Err(absl::StrCat("duplicate key \"", key, "\""));
      }
      Skip();
      if (Peek() != ':') return Err("expected ':'");
      ++pos_;
      Json value;
      s = ParseValue(&value, depth + 1);
      if (!s.ok()) return s;
      v->members.emplace_back(std::move(key), std::move(value));
      Skip();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      return Err("expected ',' or '}'");
    }
  }

  absl::Status ParseArray(Json* v, int depth) {
    v->kind = Json::kArray;
    ++pos_;  // '['
    Skip();
    if (Peek() == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      Json item;
      absl::Status s = ParseValue(&item, depth + 1);
      if (!s.ok()) return s;
      v->items.push_back(std::move(item));
      Skip();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      return Err("expected ',' or ']'");
    }
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > t_.size()) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = t_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // '"'
    out->clear();
    while (true) {
      if (pos_ >= t_.size()) return Err("unterminated string");
      const char c = t_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Err("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= t_.size()) return Err("unterminated escape");
      const char e = t_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return Err("bad \\u escape");
          if (cp >= 0xd800 && cp < 0xdc00) {
            uint32_t lo;
            if (!Word("\\u") || !Hex4(&lo) || lo < 0xdc00 || lo >= 0xe000) {
              return Err("unpaired surrogate in \\u escape");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Err("bad escape");
      }
    }
  }

  absl::string_view t_;
  absl::string_view source_;
  size_t pos_ = 0;
};

// A JSON number that must be a non-negative integer.
absl::StatusOr<uint64_t> JsonUint(const Json& v, absl::string_view source, absl::string_view what) {
  if (v.kind != Json::kNumber || v.text.empty()) {
    return Bad(source, absl::StrCat(what, " is not a number"));
  }
  uint64_t n = 0;
  for (char c : v.text) {
    if (!absl::ascii_isdigit(c)) {
      return Bad(source, absl::StrCat(what, " is not a non-negative integer: ", v.text));
    }
    if (n > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
      return Bad(source, absl::StrCat(what, " is too large: ", v.text));
    }
    n = n * 10 + (c - '0');
  }
  return n;
}

absl::StatusOr<DType> SafetensorsDType(const std::string& name, absl::string_view source,
                                       absl::string_view tensor) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return Bad(source, absl::StrCat("tensor '", tensor, "': unsupported dtype '", name,
                                  "' (expected F32, F16 or BF16)"));
}

const char* SafetensorsName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

std::string JsonEscape(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

absl::Status CheckTensor(const HostTensor& t, absl::string_view what) {
  return CheckDataSize(t.shape, t.dtype, t.bytes.size(), what, "");
}

absl::Status WriteFileBytes(const std::string& path, absl::string_view data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot open for writing (", std::strerror(errno), ")"));
  }
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string HostTensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype), ShapeString(shape));
}

std::vector<float> HostTensor::ToFloats() const {
  const int64_t n = static_cast<int64_t>(bytes.size()) / DTypeSize(dtype);
  std::vector<float> out(n);
  ToFloat(bytes.data(), dtype, n, out.data());
  return out;
}

absl::StatusOr<HostTensor> HostTensor::FromFloats(const std::vector<float>& values,
                                                  std::vector<int64_t> shape, DType dtype) {
  auto n = NumElements(shape, "FromFloats");
  if (!n.ok()) return n.status();
  if (*n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("FromFloats: shape ", ShapeString(shape),
                                                   " holds ", *n, " elements, got ", values.size(),
                                                   " values"));
  }
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * DTypeSize(dtype));
  FromFloat(values.data(), dtype, static_cast<int64_t>(values.size()), t.bytes.data());
  return t;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::InternalError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

absl::StatusOr<HostTensor> ParseNpy(absl::string_view data, absl::string_view source) {
  if (data.size() < kNpyMagicLen ||
      data.substr(0, kNpyMagicLen) != absl::string_view(kNpyMagic, kNpyMagicLen)) {
    return Bad(source, "bad magic (not an .npy file: it must start with \\x93NUMPY)");
  }
  if (data.size() < kNpyMagicLen + 2) return Bad(source, "truncated: no format version");
  const int major = static_cast<uint8_t>(data[6]);
  const int minor = static_cast<uint8_t>(data[7]);
  int len_bytes;
  if (major == 1) {
    len_bytes = 2;
  } else if (major == 2 || major == 3) {
    len_bytes = 4;
  } else {
    return Bad(source, absl::StrCat("unsupported .npy format version ", major, ".", minor,
                                    " (expected 1.0, 2.0 or 3.0)"));
  }
  if (data.size() < 8 + static_cast<size_t>(len_bytes)) {
    return Bad(source, "truncated: no header length");
  }
  const uint64_t header_len = ReadLe(data.data() + 8, len_bytes);
  if (header_len > kMaxNpyHeader) {
    return Bad(source,
               absl::StrCat("header too long: ", header_len, " bytes (limit ", kMaxNpyHeader, ")"));
  }
  const size_t header_start = 8 + len_bytes;
  if (data.size() - header_start < header_len) {
    return Bad(source,
               absl::StrCat("truncated: header of ", header_len, " bytes runs past the ",
                            "end of the file (", data.size() - header_start, " bytes left)"));
  }
  absl::string_view header = data.substr(header_start, header_len);
  if (header.empty() || header.back() != '\n') {
    return Bad(source, absl::StrCat("header too short or unterminated: ", header_len,
                                    " bytes not ending in a newline"));
  }
  PyLiteralParser parser(header, source);
  auto h = parser.Parse();
  if (!h.ok()) return h.status();
  if (h->fortran_order) {
    return Bad(source,
               "fortran_order True is not supported (save a C-ordered array, e.g. "
               "np.ascontiguousarray)");
  }
  auto dtype = NpyDescrToDType(h->descr, source);
  if (!dtype.ok()) return dtype.status();
  const size_t data_start = header_start + header_len;
  absl::Status s = CheckDataSize(h->shape, *dtype, data.size() - data_start, source, "");
  if (!s.ok()) return s;
  HostTensor t;
  t.dtype = *dtype;
  t.shape = h->shape;
  t.bytes.assign(data.begin() + data_start, data.end());
  return t;
}

absl::StatusOr<HostTensor> ReadNpy(const std::string& path) {
  auto data = ReadFileBytes(path);
  if (!data.ok()) return data.status();
  return ParseNpy(*data, path);
}

absl::StatusOr<std::string> SerializeNpy(const HostTensor& tensor) {
  absl::Status s = CheckTensor(tensor, "SerializeNpy");
  if (!s.ok()) return s;
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i) {
    absl::StrAppend(&shape, tensor.shape[i], tensor.shape.size() == 1 ? "," : "",
                    i + 1 < tensor.shape.size() ? ", " : "");
  }
  shape += ")";
  std::string dict = absl::StrCat("{'descr': '", NpyDescr(tensor.dtype),
                                  "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces so magic + version + length + header is a multiple of 64, then '\n'.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  size_t total = prefix + dict.size() + 1;
  const size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::string out(kNpyMagic, kNpyMagicLen);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  AppendLe(dict.size(), v2 ? 4 : 2, &out);
  out += dict;
  out.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  return out;
}

absl::Status WriteNpy(const std::string& path, const HostTensor& tensor) {
  auto data = SerializeNpy(tensor);
  if (!data.ok()) return data.status();
  return WriteFileBytes(path, *data);
}

absl::StatusOr<NamedTensors> ParseSafetensors(absl::string_view data, absl::string_view source,
                                              std::map<std::string, std::string>* metadata) {
  if (data.size() < 8) {
    return Bad(source, absl::StrCat("truncated: ", data.size(),
                                    " bytes, too short for the 8-byte header length"));
  }
  const uint64_t header_len = ReadLe(data.data(), 8);
  if (header_len > kMaxSafetensorsHeader) {
    return Bad(source, absl::StrCat("header too long: ", header_len, " bytes (limit ",
                                    kMaxSafetensorsHeader, ")"));
  }
  if (header_len < 2) {
    return Bad(source,
               absl::StrCat("header too short: ", header_len, " bytes cannot hold a JSON object"));
  }
  if (data.size() - 8 < header_len) {
    return Bad(source, absl::StrCat("truncated: header of ", header_len, " bytes runs past the ",
                                    "end of the file (", data.size() - 8, " bytes left)"));
  }
  absl::string_view header = data.substr(8, header_len);
  if (header[0] != '{') return Bad(source, "header does not start with '{' (not safetensors)");
  JsonParser parser(header, source);
  auto doc = parser.ParseDocument();
  if (!doc.ok()) return doc.status();
  if (doc->kind != Json::kObject) return Bad(source, "header is not a JSON object");
  const absl::string_view buffer = data.substr(8 + header_len);
  NamedTensors out;
  for (const auto& [name, info] : doc->members) {
    if (name == "__metadata__") {
      if (info.kind != Json::kObject) return Bad(source, "__metadata__ is not an object");
      for (const auto& [k, v] : info.members) {
        if (v.kind != Json::kString) {
          return Bad(source, absl::StrCat("__metadata__ value of '", k, "' is not a string"));
        }
        if (metadata) (*metadata)[k] = v.text;
      }
      continue;
    }
    const std::string what = absl::StrCat("tensor '", name, "'");
    if (info.kind != Json::kObject) return Bad(source, absl::StrCat(what, " is not an object"));
    const Json* dtype_v = nullptr;
    const Json* shape_v = nullptr;
    const Json* offsets_v = nullptr;
    for (const auto& [k, v] : info.members) {
      if (k == "dtype") dtype_v = &v;
      if (k == "shape") shape_v = &v;
      if (k == "data_offsets") offsets_v = &v;
    }
    if (!dtype_v || dtype_v->kind != Json::kString) {
      return Bad(source, absl::StrCat(what, ": missing or non-string 'dtype'"));
    }
    if (!shape_v || shape_v->kind != Json::kArray) {
      return Bad(source, absl::StrCat(what, ": missing or non-array 'shape'"));
    }
    if (!offsets_v || offsets_v->kind != Json::kArray || offsets_v->items.size() != 2) {
      return Bad(source, absl::StrCat(what, ": 'data_offsets' must be [begin, end]"));
    }
    auto dtype = SafetensorsDType(dtype_v->text, source, name);
    if (!dtype.ok()) return dtype.status();
    HostTensor t;
    t.dtype = *dtype;
    for (const Json& d : shape_v->items) {
      auto dim = JsonUint(d, source, absl::StrCat(what, ": shape entry"));
      if (!dim.ok()) return dim.status();
      if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Bad(source, absl::StrCat(what, ": shape entry too large"));
      }
      t.shape.push_back(static_cast<int64_t>(*dim));
    }
    auto begin = JsonUint(offsets_v->items[0], source, absl::StrCat(what, ": data_offsets[0]"));
    if (!begin.ok()) return begin.status();
    auto end = JsonUint(offsets_v->items[1], source, absl::StrCat(what, ": data_offsets[1]"));
    if (!end.ok()) return end.status();
    if (*begin > *end || *end > buffer.size()) {
      return Bad(source,
                 absl::StrCat(what, ": data_offsets [", *begin, ", ", *end,
                              ") out of range of the ", buffer.size(), "-byte data buffer"));
    }
    absl::Status s = CheckDataSize(t.shape, t.dtype, *end - *begin, source, what + ": ");
    if (!s.ok()) return s;
    t.bytes.assign(buffer.begin() + *begin, buffer.begin() + *end);
    out.emplace(name, std::move(t));
  }
  return out;
}

absl::StatusOr<NamedTensors> ReadSafetensors(const std::string& path,
                                             std::map<std::string, std::string>* metadata) {
  auto data = ReadFileBytes(path);
  if (!data.ok()) return data.status();
  return ParseSafetensors(*data, path, metadata);
}

absl::StatusOr<std::string> SerializeSafetensors(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      absl::StrAppend(&header, JsonEscape(k), ":", JsonEscape(v));
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") {
      return absl::InvalidArgumentError("SerializeSafetensors: '__metadata__' is reserved");
    }
    absl::Status s = CheckTensor(t, absl::StrCat("SerializeSafetensors: tensor '", name, "'"));
    if (!s.ok()) return s;
    if (header.size() > 1) header += ",";
    absl::StrAppend(&header, JsonEscape(name), ":{\"dtype\":\"", SafetensorsName(t.dtype),
                    "\",\"shape\":[", absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset,
                    ",", offset + t.bytes.size(), "]}");
    offset += t.bytes.size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // Data starts 8-byte aligned.
  std::string out;
  AppendLe(header.size(), 8, &out);
  out += header;
  for (const auto& [name, t] : tensors) {
    out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  auto data = SerializeSafetensors(tensors, metadata);
  if (!data.ok()) return data.status();
  return WriteFileBytes(path, *data);
}

absl::StatusOr<HostTensor> ReadTensorSpec(absl::string_view spec) {
  std::string path(spec), name;
  const size_t ext = spec.find(".safetensors");
  if (ext != absl::string_view::npos) {
    const size_t after = ext + std::string(".safetensors").size();
    if (after < spec.size()) {
      if (spec[after] != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat(spec, ": expected 'file.safetensors' or 'file.safetensors:name'"));
      }
      path = std::string(spec.substr(0, after));
      name = std::string(spec.substr(after + 1));
    }
    auto all = ReadSafetensors(path);
    if (!all.ok()) return all.status();
    if (name.empty()) {
      if (all->size() != 1) {
        std::vector<std::string> names;
        for (const auto& kv : *all) names.push_back(kv.first);
        return absl::InvalidArgumentError(absl::StrCat(path, ": holds ", all->size(), " tensors (",
                                                       absl::StrJoin(names, ", "),
                                                       "); name one as ", path, ":NAME"));
      }
      return std::move(all->begin()->second);
    }
    auto it = all->find(name);
    if (it == all->end()) {
      return absl::NotFoundError(absl::StrCat(path, ": no tensor named '", name, "'"));
    }
    return std::move(it->second);
  }
  if (absl::EndsWith(spec, ".npy")) return ReadNpy(path);
  return absl::InvalidArgumentError(
      absl::StrCat(spec, ": unknown tensor file type (expected .npy or .safetensors)"));
}

}  // namespace spattn
