// Framing of every value the index store writes:
//   "SPX1" | u32 LE header length | header (serialized protobuf) | payload | u32 LE crc32c
// The crc32c covers every byte before it, so any flipped byte reads back as DATA_LOSS instead of
// a silently wrong config or centroid. `payload` holds a tensor's raw bytes (empty otherwise).
#ifndef SPATTN_INDEX_RECORD_CODEC_H_
#define SPATTN_INDEX_RECORD_CODEC_H_

#include <google/protobuf/message_lite.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace spattn {

std::string EncodeRecord(const google::protobuf::MessageLite& header,
                         absl::string_view payload = {});

// Checks magic, lengths and crc32c, then parses the header. `what` names the row in errors
// ("head config of model m version 3 layer 1 head 2"). DATA_LOSS on any mismatch.
absl::Status DecodeRecord(absl::string_view value, absl::string_view what,
                          google::protobuf::MessageLite* header, absl::string_view* payload);

}  // namespace spattn

#endif  // SPATTN_INDEX_RECORD_CODEC_H_
