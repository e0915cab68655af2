#!/bin/bash
# Bazel's --workspace_status_command for stamped builds (--config=release):
# prints the STABLE_ keys that service/build_stamp.cc is generated from.
# STABLE_GIT_COMMIT is $GEMM_BUILD_COMMIT when set (a build from a source
# tree without .git, e.g. a container build passed the commit), else the
# checkout's HEAD, with "-dirty" when tracked files differ from it.
# Prints nothing for a key it cannot find out; the binary then says "unknown".
set -u
commit="${GEMM_BUILD_COMMIT:-}"
if [ -z "$commit" ] && commit="$(git rev-parse HEAD 2>/dev/null)"; then
  git diff-index --quiet HEAD -- 2>/dev/null || commit="${commit}-dirty"
fi
[ -n "$commit" ] && echo "STABLE_GIT_COMMIT ${commit}"
exit 0
