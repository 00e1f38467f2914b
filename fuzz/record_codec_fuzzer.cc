// The RocksDB value codec ("SPX1" | length | protobuf header | payload | crc32c): arbitrary
// stored bytes give DATA_LOSS or a header, never a crash; what decodes re-encodes identically.
#include <cstddef>
#include <cstdint>
#include <string>

#include "index/crc32c.h"
#include "index/record_codec.h"
#include "index/storage.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view value(reinterpret_cast<const char*>(data), size);
  spattn::index::TensorRecordHeader header;
  absl::string_view payload;
  if (spattn::DecodeRecord(value, "fuzz row", &header, &payload).ok()) {
    if (payload.data() < value.data() || payload.data() + payload.size() > value.data() + size) {
      __builtin_trap();
    }
  }
  spattn::index::HeadConfigRecord config;
  (void)spattn::DecodeRecord(value, "fuzz row", &config, &payload);
  // The same bytes with a correct crc32c: exercises the framing and header parsing behind the
  // checksum (a random input almost never passes it).
  if (size >= 4) {
    std::string fixed(value);
    const uint32_t crc = spattn::Crc32c(fixed.data(), size - 4);
    for (int i = 0; i < 4; ++i) fixed[size - 4 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
    if (spattn::DecodeRecord(fixed, "fuzz row", &header, &payload).ok()) {
      if (payload.data() < fixed.data() || payload.data() + payload.size() > fixed.data() + size) {
        __builtin_trap();
      }
    }
  }
  // Round trip: a record we encode always decodes.
  const std::string encoded = spattn::EncodeRecord(config, value.substr(0, size / 2));
  if (!spattn::DecodeRecord(encoded, "round trip", &config, &payload).ok()) __builtin_trap();
  return 0;
}
