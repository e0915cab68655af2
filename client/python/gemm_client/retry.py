"""When and how long to wait before retrying a failed call: the C++ client's
policy (exponential backoff with jitter on UNAVAILABLE and RESOURCE_EXHAUSTED,
the server's `grpc-retry-pushback-ms` trailer instead when it sends one, and
never past the call's deadline).

Pure functions of their arguments (randomness comes in as a uniform number in
[0, 1)), so the policy is tested without clocks or RPCs.
"""

import dataclasses
import math

import grpc

PUSHBACK_KEY = "grpc-retry-pushback-ms"

RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Retry settings; the defaults are the C++ client's."""

    # Attempts in all, the first included; 1 disables retries.
    max_attempts: int = 5
    # Seconds before the first retry; multiplied by `multiplier` after each
    # retry and capped at `max_backoff`.
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    # Each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter].
    jitter: float = 0.2

    def validate(self):
        """ValueError naming the bad field, or None."""
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"retry.max_attempts must be an int >= 1, got {self.max_attempts!r}")
        if not self.initial_backoff >= 0:
            raise ValueError("retry.initial_backoff must not be negative")
        if not self.max_backoff >= self.initial_backoff:
            raise ValueError("retry.max_backoff must be >= retry.initial_backoff")
        if not (self.multiplier >= 1.0 and math.isfinite(self.multiplier)):
            raise ValueError(
                f"retry.multiplier must be a finite number >= 1, got {self.multiplier!r}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"retry.jitter must be in [0, 1], got {self.jitter!r}")


# What a pushback trailer says: absent (use the backoff), a delay in seconds,
# or DONT_RETRY (a negative or unparseable value).
DONT_RETRY = "dont_retry"


def parse_pushback(trailing_metadata):
    """None (no hint), DONT_RETRY, or the delay in seconds the server asks for."""
    for key, value in trailing_metadata or ():
        if key != PUSHBACK_KEY:
            continue
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        try:
            ms = int(value.strip())
        except ValueError:
            return DONT_RETRY
        return DONT_RETRY if ms < 0 else ms / 1000.0
    return None


def backoff_delay(policy, retry, uniform):
    """Seconds before retry number `retry` (1 = before the second attempt)."""
    base = min(policy.max_backoff,
               policy.initial_backoff * policy.multiplier ** max(0, retry - 1))
    u = min(max(uniform, 0.0), 1.0)
    return max(0.0, base * (1.0 + policy.jitter * (2.0 * u - 1.0)))


def next_retry_delay(policy, attempts_made, code, pushback, now, deadline, uniform):
    """Seconds to wait before the next attempt after attempt `attempts_made`
    (1-based) failed with `code`, or None to give up: not retryable, attempts
    used up, the server said not to, or the retry would start at or past
    `deadline` (same clock as `now`; None = no deadline)."""
    if code not in RETRYABLE_CODES or attempts_made >= policy.max_attempts:
        return None
    if pushback == DONT_RETRY:
        return None
    delay = pushback if pushback is not None else backoff_delay(policy, attempts_made, uniform)
    if deadline is not None and now + delay >= deadline:
        return None
    return delay
