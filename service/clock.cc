#include "service/clock.h"

namespace gemm {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock;
  return clock;
}

}  // namespace gemm
