#include "kernels/common/error.h"

namespace qs {

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadInput: return "bad input";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Device: return "device error";
    case ErrorKind::Cancelled: return "cancelled";
    case ErrorKind::Internal: return "internal error";
  }
  return "error";
}

static std::string joinParts(const std::string& file, const std::string& field,
                             const std::string& message) {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!field.empty()) out += field + ": ";
  out += message;
  // One line, always: a message must never break the CLI's one-line contract.
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

Error::Error(ErrorKind kind, std::string message, std::string file, std::string field)
    : std::runtime_error(joinParts(file, field, message)),
      kind_(kind),
      file_(std::move(file)),
      field_(std::move(field)),
      message_(std::move(message)) {}

void throwBadInput(const std::string& file, const std::string& field, const std::string& message) {
  throw Error(ErrorKind::BadInput, message, file, field);
}

}  // namespace qs
