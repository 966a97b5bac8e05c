// Status and Result<T>: errors as values. A failed Status carries a one-line message that
// names the file or flag, the field and the expected form, and a kind that the CLI maps to
// its exit code (bad_input -> 2, runtime -> 1). No exception crosses a library API.
//
// Thread-safety: plain values.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace llmplan {

enum class ErrorKind { none, bad_input, runtime };

class Status {
 public:
  Status() = default;  // success
  static Status ok() { return Status(); }
  static Status bad_input(std::string message) { return Status(ErrorKind::bad_input, std::move(message)); }
  static Status runtime(std::string message) { return Status(ErrorKind::runtime, std::move(message)); }

  bool is_ok() const { return kind_ == ErrorKind::none; }
  explicit operator bool() const { return is_ok(); }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  // Process exit code for this status: 0 success, 1 runtime failure, 2 bad input.
  int exit_code() const { return kind_ == ErrorKind::none ? 0 : (kind_ == ErrorKind::bad_input ? 2 : 1); }
  // Same kind, message prefixed with "context: " (e.g. the file name).
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : Status(kind_, context + ": " + message_);
  }

 private:
  Status(ErrorKind k, std::string m) : kind_(k), message_(std::move(m)) {}
  ErrorKind kind_ = ErrorKind::none;
  std::string message_;
};

// A value or the Status that says why there is none.
// REQUIRES for value(): ok().
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}                  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}          // NOLINT: implicit by design
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace llmplan
