"""The test modules that took longest in a pytest run, from its JUnit XML: what the suite's
`LONGEST_FIRST` (tests/conftest.py) should list, since pytest-xdist hands whole modules to
its workers in order and a long one started last decides when the suite ends.
Run: python scripts/slowest_modules.py JUNIT.xml [COUNT]"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter


def module_of(classname: str) -> str:
    """`tests/consumer/test_sdk.py` from `tests.consumer.test_sdk` (or its `.TestClass`)."""
    parts = classname.split(".")
    last = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
    return "/".join(parts[: last + 1]) + ".py"


def module_ms(junit_xml: str) -> Counter[str]:
    """Milliseconds per test module (setup, call and teardown of its tests added up)."""
    spent: Counter[str] = Counter()
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        spent[module_of(case.get("classname", ""))] += round(float(case.get("time", "0")) * 1000)
    return spent


def main() -> None:
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    print(f"slowest {count} modules (s):")
    for module, ms in module_ms(sys.argv[1]).most_common(count):
        print(f"{ms // 1000:6d}.{ms % 1000 // 100}  {module}")


if __name__ == "__main__":
    main()
