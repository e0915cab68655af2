#!/bin/bash
# make_build_stamp.sh: the commit of a stamped status file, "unknown" for an
# unstamped one or a value that is not a commit.
set -u
gen="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
commit_of() { printf '%s\n' "$@" >"$work/status"; "$gen" "$work/status" | sed -n 's/.*kBuildCommit\[\] = "\(.*\)";/\1/p'; }

got="$(commit_of "BUILD_HOST h" "STABLE_GIT_COMMIT 0123456789abcdef0123456789abcdef01234567")"
[ "$got" = "0123456789abcdef0123456789abcdef01234567" ] || fail "stamped: got '$got'"
got="$(commit_of "STABLE_GIT_COMMIT 0123456789abcdef0123456789abcdef01234567-dirty")"
[ "$got" = "0123456789abcdef0123456789abcdef01234567-dirty" ] || fail "dirty: got '$got'"
got="$(commit_of "BUILD_HOST h" "BUILD_USER u")"
[ "$got" = "unknown" ] || fail "unstamped: got '$got'"
got="$(commit_of 'STABLE_GIT_COMMIT ";abort();"')"
[ "$got" = "unknown" ] || fail "not a commit: got '$got'"
echo PASS
