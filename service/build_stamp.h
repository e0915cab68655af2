// What the build stamped into the binary. Generated (service:build_stamp,
// from tools/stamp/make_build_stamp.sh): a build with --config=release
// carries the commit it was built from; any other build says "unknown".
#ifndef GEMM_SERVICE_BUILD_STAMP_H_
#define GEMM_SERVICE_BUILD_STAMP_H_

namespace gemm {

// The git commit (40 hex digits, "-dirty" when the tree had changes), or
// "unknown".
extern const char kBuildCommit[];

}  // namespace gemm

#endif  // GEMM_SERVICE_BUILD_STAMP_H_
