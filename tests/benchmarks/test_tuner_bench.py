"""The tuner suite on one layer (its exhaustive table ships with the package): the JSON keys
benchmarks README names, every tuning run reaching 95% of the exhaustive best, and the tuned
schedule's figures."""

import pytest

pytest.importorskip("xgboost", reason="the cost model needs xgboost (the tune extra)")


@pytest.mark.slow
def test_tuner_suite_on_one_layer():
    from tilecraft.benchmarks import tuner

    r = tuner.run(seeds=2, layers=["C9"])
    (row,) = r["layers"]
    assert row["name"] == "C9" and row["schedules"] > 100
    for key in ("tuner_trials", "random_trials", "transfer_trials"):
        assert len(row[key]) == 2 and all(1 <= t <= row["schedules"] for t in row[key])
    assert row["tuned_cycles"] >= row["exhaustive_best"]
    assert 0 < row["tuned_utilization"] <= 1 and 0 < row["tuned_roofline_fraction"] <= 1.0001
    for key in (
        "median_trials_ratio",
        "tuned_min_roofline_fraction",
        "tuned_mac_weighted_utilization",
    ):
        assert key in r
    assert "C9" in tuner.format_table(r)
