// Marks for ThreadSanitizer of the order gRPC's callback API gives a reactor's reactions.
//
// gRPC runs the reactions of one reactor (OnReadDone, OnWriteDone, OnDone) one at a time, each
// after the operation (StartRead, StartWrite, Finish) that an earlier reaction or the
// constructor started, but possibly on another thread. gRPC core orders them with atomics
// inside libgrpc, which is not built with -fsanitize=thread here (Debian's package), so TSan
// sees no happens-before edge and reports the reactor's own fields, touched in one reaction and
// again in the next, as a race. A reactor calls ReactorRelease(this) just before starting an
// operation and ReactorAcquire(this) first thing in each reaction; both are no-ops unless the
// build is --config=tsan (which defines SPATTN_TSAN).
#ifndef SPATTN_PROTO_REACTOR_ORDER_H_
#define SPATTN_PROTO_REACTOR_ORDER_H_

#if defined(SPATTN_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace spattn {

inline void ReactorRelease(const void* reactor) {
#if defined(SPATTN_TSAN)
  __tsan_release(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}

inline void ReactorAcquire(const void* reactor) {
#if defined(SPATTN_TSAN)
  __tsan_acquire(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}

}  // namespace spattn

#endif  // SPATTN_PROTO_REACTOR_ORDER_H_
