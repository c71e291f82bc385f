// Internal Status helpers (Debian's Abseil predates its own macros).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WDS_CONCAT_INNER_(a, b) a##b
#define WDS_CONCAT_(a, b) WDS_CONCAT_INNER_(a, b)

// WDS_RETURN_IF_ERROR(expr) returns the Status of `expr` if it is not ok.
#define WDS_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status wds_status_ = (expr);       \
    if (!wds_status_.ok()) return wds_status_; \
  } while (0)

// WDS_ASSIGN_OR_RETURN(lhs, expr) evaluates a StatusOr `expr`; returns its
// Status on error, else assigns its value to `lhs` (which may declare).
#define WDS_ASSIGN_OR_RETURN(lhs, expr) \
  WDS_ASSIGN_OR_RETURN_IMPL_(WDS_CONCAT_(wds_statusor_, __LINE__), lhs, expr)
#define WDS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
