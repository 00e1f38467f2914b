// absl in Debian 12 (20220623) has no RETURN_IF_ERROR / ASSIGN_OR_RETURN; these are ours.
#ifndef SPATTN_KERNELS_STATUS_MACROS_H_
#define SPATTN_KERNELS_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SPATTN_CONCAT_INNER(a, b) a##b
#define SPATTN_CONCAT(a, b) SPATTN_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define SPATTN_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status spattn_status_ = (expr);          \
    if (!spattn_status_.ok()) return spattn_status_; \
  } while (0)

// `lhs = value of expr`, or returns its status when not OK. lhs may declare a variable.
#define SPATTN_ASSIGN_OR_RETURN(lhs, expr) \
  SPATTN_ASSIGN_OR_RETURN_IMPL(SPATTN_CONCAT(spattn_statusor_, __LINE__), lhs, expr)
#define SPATTN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // SPATTN_KERNELS_STATUS_MACROS_H_
