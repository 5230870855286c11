"""The provider page's earnings chart: a bar for every day from the first earning day (at most
30 days back) to the last, idle days included as empty bars, each labelled with its day."""

from __future__ import annotations

from offchain.market.explorer.format import CHART_DAYS, CHART_H, DAY_MS, earnings_bars

NOV_27 = 1_795_737_600_000  # 2026-11-27 00:00 UTC


def test_idle_days_are_bars_of_none_and_each_day_is_labelled() -> None:
    days = [{"day_ms": NOV_27, "lovelace": 4_000_000},
            {"day_ms": NOV_27 + 5 * DAY_MS, "lovelace": 1_000_000}]  # fmt: skip
    bars = earnings_bars(days)
    assert [b["label"] for b in bars] == ["Nov 27", "28", "29", "30", "Dec 1", "2"]
    assert [b["lovelace"] for b in bars] == [4_000_000, 0, 0, 0, 0, 1_000_000]
    assert bars[0]["height"] == CHART_H and bars[1]["height"] == 0
    assert bars[-1]["height"] == CHART_H // 4
    assert [b["x"] for b in bars] == sorted({b["x"] for b in bars})  # left to right, apart


def test_the_chart_shows_the_last_30_days_at_most() -> None:
    days = [{"day_ms": NOV_27 - 100 * DAY_MS, "lovelace": 1}, {"day_ms": NOV_27, "lovelace": 2}]
    bars = earnings_bars(days)
    assert len(bars) == CHART_DAYS and bars[-1]["day_ms"] == NOV_27
    assert bars[0]["label"] == "Oct 29"  # where the chart begins: its month too
    assert earnings_bars([]) == []
