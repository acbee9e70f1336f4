"""``vlrl bench serve``: every side measured, ratios from the sides' own numbers (no timing threshold:
docs/benchmarks.md records the numbers of one machine)."""

from __future__ import annotations

from tests.support.serve import READER
from vlrl.bench.serve import bench_serve


def test_bench_serve_reports_every_side_and_batches_across_clients():
    res = bench_serve(answerer=READER, n_rows=16, request_rows=2, clients=4, repeats=1, max_wait_ms=300)
    for side in ("in_process", "service_1_client", "service_8_clients"):
        r = res[side]
        assert r["rows"] == 16 and r["requests"] == 8 and r["rows_per_s"] > 0
        assert 0 < r["latency_p50_s"] <= r["latency_p99_s"]
    assert res["batching_gain"] == round(res["service_8_clients"]["rows_per_s"] / res["service_1_client"]["rows_per_s"], 3)
    assert res["service_8_clients"]["mean_rows_per_reward_call"] > 2  # concurrent requests were merged
    assert res["settings"]["answerer"] == READER
