"""The broker benchmark's curl scenarios: the config curl reads and the figures made from its runs."""

from __future__ import annotations

from types import SimpleNamespace

from bench.broker_bench import GET_URL, SESSION, _curl_config, summarise_curl


def test_curl_config_spreads_the_calls_over_sessions_each_through_the_proxy(tmp_path):
    proxy = SimpleNamespace(proxy_url=lambda: "http://127.0.0.1:9", ca="/ca.pem")
    cfg = tmp_path / "c.cfg"
    _curl_config(cfg, proxy, 10, 3)
    sections = cfg.read_text().split("next\n")
    assert len(sections) == 3
    counts = [s.count(f'url = "{GET_URL}"') for s in sections]
    assert counts == [4, 3, 3]
    for j, s in enumerate(sections):  # curl resets options at `next`: each section names the proxy again
        assert 'proxy = "http://127.0.0.1:9"' in s and 'cacert = "/ca.pem"' in s
        assert f'X-Broker-Session: {SESSION}-{j}' in s
    _curl_config(cfg, proxy, 5, 1)
    assert "next" not in cfg.read_text() and "X-Broker-Session" not in cfg.read_text()


def _row(target: str, rnd: int, req_s: float, proxy_cpu: float) -> dict:
    n = 100
    return {"scenario": "s", "round": rnd, "target": target, "requests": n, "seconds": n / req_s, "req_s": req_s,
            "client_cpu": 0.01, "upstream_cpu": 0.02, "proxy_cpu": proxy_cpu, "service_cpu": 0.0,
            "lat_ns": [1_000_000] * n}


def test_curl_summary_counts_every_process_and_takes_ratios_within_rounds():
    rows = [_row("lean", 1, 500, 0.07), _row("broker", 1, 250, 0.12), _row("broker2", 1, 500, 0.15),
            _row("lean", 2, 200, 0.07), _row("broker", 2, 100, 0.12), _row("broker2", 2, 150, 0.15)]
    table, (ratios,) = summarise_curl(rows, [{"name": "s"}])
    broker = next(r for r in table if r["target"] == "broker")
    assert round(broker["total_cpu_us"]) == 1500  # proxy 1200 + fake 200 + curl 100 us per call
    assert round(broker["calls_per_cpu_s"]) == round(1e6 / 1500)
    assert ratios["broker/lean"] == 0.5  # 0.5 in both rounds, whatever each round's speed
    assert ratios["broker2/broker"] == 1.75  # median of 2.0 and 1.5
