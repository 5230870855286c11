"""Burn one core for a while, then say how much CPU time this process used (os.times), so the
provider's metered CPU time can be checked against the workload's own account."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    end = time.monotonic() + seconds
    counter = 0
    while time.monotonic() < end:
        for _ in range(10_000):
            counter += 1
    times = os.times()
    print(json.dumps({"cpu_ns": int((times.user + times.system) * 1e9), "loops": counter}))


if __name__ == "__main__":
    main()
