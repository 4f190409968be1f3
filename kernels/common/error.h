#pragma once
// The one error type of Quantscope. Every failure the user can cause (a corrupt file, a bad plan,
// a wrong flag) is ErrorKind::BadInput and names the file and the field; the CLI maps it to exit
// code 2 and the GUI to a dialog. Device (CUDA) errors never abort: they become ErrorKind::Device.
#include <stdexcept>
#include <string>

namespace qs {

enum class ErrorKind {
  BadInput,     // the input (file, plan, argument) is wrong: user's to fix
  Unsupported,  // valid input we do not handle (e.g. an unknown tensor type asked for data)
  Device,       // CUDA / driver failure, out of device memory
  Cancelled,    // the user cancelled a job
  Internal,     // a bug or an environment failure (I/O error, out of host memory)
};

const char* errorKindName(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  // `file` and `field` may be empty; what() joins the non-empty parts: "FILE: FIELD: message".
  Error(ErrorKind kind, std::string message, std::string file = {}, std::string field = {});

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& file() const noexcept { return file_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& message() const noexcept { return message_; }

  // True for errors the user caused (CLI exit code 2).
  bool isUserError() const noexcept {
    return kind_ == ErrorKind::BadInput || kind_ == ErrorKind::Unsupported;
  }

 private:
  ErrorKind kind_;
  std::string file_, field_, message_;
};

[[noreturn]] void throwBadInput(const std::string& file, const std::string& field,
                                const std::string& message);

}  // namespace qs
