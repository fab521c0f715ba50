#include "loom/error.h"

namespace loom {

std::string Error::Visible(const std::string& message) {
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
