"""A month of nightly reports of a small fleet, for the drift and table tests: each node's busbw scatters 2 % a
night around the fleet's, one node's may decline a fixed share a night, and every night may move the whole fleet."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from pathlib import Path

from ds_doctor.reports.model import Report
from tests.reports.fleet_samples import node, write_nightly


@dataclasses.dataclass(frozen=True)
class Month:
    nights: int = 30
    nodes: int = 8
    noise: float = 0.02  # each node, each night
    declining: str | None = "node-3"
    decline: float = 0.02  # a night, of the declining node
    fleet_trend: float = 0.0  # a night, of every node (a software upgrade, a busy fabric): names no one
    seed: int = 7

    def reports(self) -> list[Report]:
        rng = random.Random(self.seed)
        last = dt.datetime.now(dt.timezone.utc).replace(hour=2, minute=0, second=0, microsecond=0)
        built = []
        for night in range(self.nights):
            when = last - dt.timedelta(days=self.nights - 1 - night)
            for i in range(self.nodes):
                host = f"node-{i}"
                busbw = 100 * (1 + rng.gauss(0, self.noise)) * (1 + self.fleet_trend) ** night
                if host == self.declining:
                    busbw *= (1 - self.decline) ** night
                built.append(node(host, busbw=round(busbw, 3), started=when))
        return built

    def write(self, state: Path) -> list[Report]:
        reports = self.reports()
        for report in reports:
            write_nightly(state, report)
        return reports
