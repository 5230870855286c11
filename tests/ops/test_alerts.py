"""docs/ops/alerts.yml is valid for Prometheus (`promtool check rules`) and each alert fires
when, and only when, its case says (`promtool test rules tests/ops/alerts_test.yml`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.ops.prometheus import ALERTS, tool

CASES = Path(__file__).parent / "alerts_test.yml"


def test_alert_rules_are_valid():
    checked = subprocess.run([tool("promtool"), "check", "rules", str(ALERTS)],
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout


def test_alerts_fire_as_their_cases_say():
    tested = subprocess.run([tool("promtool"), "test", "rules", str(CASES)],
                            capture_output=True, text=True, cwd=CASES.parent)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
