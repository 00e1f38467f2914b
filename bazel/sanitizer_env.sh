#!/bin/sh
# `--run_under` wrapper of the sanitizer configurations (.bazelrc): //bazel:asan_env for
# --config=asan, //bazel:tsan_env for --config=tsan (one script; the name it runs under picks).
# Suppression files are data files of the wrapper, so they sit beside it in the test's runfiles;
# they are passed by absolute path (a sanitizer resolves a relative one against the binary's
# directory, and processes a test starts may change directory). Options --test_env already put
# into LSAN_OPTIONS / TSAN_OPTIONS are kept.
#  asan: LSAN_OPTIONS gets bazel/lsan.supp.
#  tsan: TSAN_OPTIONS gets bazel/tsan.supp. The binaries load Abseil built with
#        -fsanitize=thread from /opt/spattn-tsan-absl/lib (their DT_RPATH, .bazelrc; made by
#        deploy/tsan_absl.sh) so that TSan sees absl::Mutex, which our index service and gRPC
#        core synchronize with. Without it TSan reports nearly every hand-off through gRPC as a
#        race, so the wrapper refuses to run when it is missing.
here="$(cd "$(dirname "$0")" && pwd)"
case "$(basename "$0")" in
  asan_env*)
    supp="$here/lsan.supp"
    [ -r "$supp" ] || { echo "sanitizer_env: $supp not found" >&2; exit 1; }
    LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$supp"
    export LSAN_OPTIONS
    ;;
  tsan_env*)
    supp="$here/tsan.supp"
    [ -r "$supp" ] || { echo "sanitizer_env: $supp not found" >&2; exit 1; }
    absl=/opt/spattn-tsan-absl/lib
    if [ ! -r "$absl/libabsl_synchronization.so.20220623" ]; then
      echo "sanitizer_env: no Abseil built with -fsanitize=thread in $absl;" \
        "run deploy/tsan_absl.sh first" >&2
      exit 1
    fi
    TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$supp"
    export TSAN_OPTIONS
    ;;
  *)
    echo "sanitizer_env: run as asan_env or tsan_env, not $(basename "$0")" >&2
    exit 1
    ;;
esac
exec "$@"
