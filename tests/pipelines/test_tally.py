"""Tally: counts from parallel workers add up by field type, from objects or their JSON."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from pipelines.tally import Tally


@dataclass
class Seen(Tally):
    rows: int = 0
    seconds: float = 0.0
    reason: Counter = field(default_factory=Counter)
    domain: dict = field(default_factory=dict)
    pairs: set = field(default_factory=set)
    failures: dict = field(default_factory=dict)


def test_parts_merge_by_field_type_and_survive_json():
    a = Seen(2, 1.5, Counter(dup=1), {"web": {"kept": 1}}, {("c1", "t1")}, {"e1": "timeout"})
    b_domain = {"web": {"kept": 2}, "os": {"kept": 4}}
    b = Seen(3, 0.5, Counter(dup=2, pii=1), b_domain, {("c1", "t2")}, {"e1": "other", "e2": "crash"})
    total = Seen()
    total.merge(a)
    total.merge(json.loads(json.dumps(b.to_json())))
    assert total.rows == 5 and total.seconds == 2.0
    assert total.reason == Counter(dup=3, pii=1)
    assert total.domain == {"web": {"kept": 3}, "os": {"kept": 4}}
    assert total.pairs == {("c1", "t1"), ("c1", "t2")}
    assert total.failures == {"e1": "timeout", "e2": "crash"}  # the first reason seen stays
    assert a.domain == {"web": {"kept": 1}}  # merging copied, it did not alias a part's dicts
