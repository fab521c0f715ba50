#include "loom/error.h"

namespace loom {

std::string Error::Visible(const std::string& raw) {
  // nlohmann::json's "[json.exception.parse_error.101] " names its own
  // exception class, not the input: the reason after it is kept.
  std::string message = raw;
  for (size_t at = message.find("[json.exception."); at != std::string::npos;
       at = message.find("[json.exception.", at)) {
    const size_t end = message.find("] ", at);
    if (end == std::string::npos) break;
    message.erase(at, end + 2 - at);
  }
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace loom
