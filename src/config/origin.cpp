// Origin formatting: how a value's source appears in messages and in the
// resolved configuration ("file:line", or the source alone when no line).
#include "wg/config/config.h"

namespace wg {

std::string Origin::str() const {
  if (line > 0) return source + ":" + std::to_string(line);
  return source;
}

}  // namespace wg
