"""What every part of a scrape shares: the families of one scrape, made from the catalog (so a name, its labels and
its HELP cannot drift from docs/metrics.md), and the check every exported number passes. Each collector part
(collector.py: the supervisor, jobs and GPUs; queue_collector.py: the host's queue) adds its series to one
`Families` per scrape, node_exporter style: one part per file, one scrape."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from .catalog import BY_NAME


def num(v: Any) -> float | None:
    """A number to export, or None: a status row read from JSON carries whatever types it was given."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class Families:
    """Creates families on first use from the catalog, so names/labels/help can't drift."""

    def __init__(self) -> None:
        self._fams: dict[str, Metric] = {}

    def get(self, name: str) -> Metric:
        fam = self._fams.get(name)
        if fam is None:
            d = BY_NAME[name]
            if d.type == "counter":
                fam = CounterMetricFamily(name[: -len("_total")], d.help, labels=list(d.labels))
            elif d.type == "histogram":
                fam = HistogramMetricFamily(name, d.help, labels=list(d.labels))
            else:
                fam = GaugeMetricFamily(name, d.help, labels=list(d.labels))
            self._fams[name] = fam
        return fam

    def add(self, name: str, labels: Iterable[str], value: float | None) -> None:
        if value is None:
            return  # not reported: no series, never a fake 0
        self.get(name).add_metric(list(labels), value)  # type: ignore[attr-defined]  # on every family class

    def families(self) -> list[Metric]:
        return list(self._fams.values())
