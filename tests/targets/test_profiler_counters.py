"""The profiler's measured MAC figure from the MAC_ACTIVE / FC_MAC_ACTIVE counters: conv-array
cycles weigh C*C MACs, FC-engine cycles F MACs, over the frame's cycles times C*C."""

from __future__ import annotations

import pytest

from dlproc.targets.profiler import LayerProfile, MacActivity, ProfileResult


def _result(act: MacActivity | None) -> ProfileResult:
    layers = [LayerProfile("conv1", 600, macs=600 * 16 * 8), LayerProfile("fc1", 400, macs=400 * 4)]
    return ProfileResult("sim", 100.0, 4, 1, 1000, 1000, layers, act)


def test_issued_utilization_weighs_each_engine_by_its_macs_per_cycle():
    prof = _result(MacActivity(conv_cycles=500, fc_cycles=400, fc_lanes=4))
    # (500 * 16 + 400 * 4) / (1000 * 16)
    assert prof.issued_utilization == pytest.approx(0.6)
    table = prof.table()
    assert "MAC array 500 cycles (50.0%)" in table
    assert "FC lanes 400 cycles x 4 MACs (40.0%)" in table
    assert "= 60.0%" in table
    total = prof.to_dict()["total"]
    assert (total["mac_active"], total["fc_mac_active"], total["fc_lanes"]) == (500, 400, 4)


def test_without_counters_nothing_is_claimed():
    prof = _result(None)
    assert prof.issued_utilization is None
    assert "MAC_ACTIVE" not in prof.table()
    assert set(prof.to_dict()["total"]) == {"cycles"}


def test_no_fc_engine_shows_only_the_array():
    prof = _result(MacActivity(conv_cycles=250, fc_cycles=0, fc_lanes=0))
    assert prof.issued_utilization == pytest.approx(0.25)
    assert "FC lanes" not in prof.table()
