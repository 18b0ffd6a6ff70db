#!/usr/bin/env python3
"""Known-good and known-bad histories for lincheck.py (python3 -m unittest test_lincheck)."""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lincheck import check_history  # noqa: E402


def w(v, call, ret, ok=True, k="x"):
    return {"op": "w", "k": k, "v": v, "call": call, "ret": ret, "ok": ok}


def r(v, call, ret, k="x"):
    return {"op": "r", "k": k, "v": v, "call": call, "ret": ret, "ok": True}


def ok(h):
    return not check_history(h)["violations"]


class Good(unittest.TestCase):
    def test_sequential(self):
        self.assertTrue(ok([r(0, 0, 1), w(1, 2, 3), r(1, 4, 5), w(2, 6, 7), r(2, 8, 9)]))

    def test_concurrent_read_may_see_either(self):
        # The read overlaps the write: old or new value are both fine.
        self.assertTrue(ok([w(1, 0, 1), w(2, 2, 10), r(1, 3, 4)]))
        self.assertTrue(ok([w(1, 0, 1), w(2, 2, 10), r(2, 3, 4)]))

    def test_concurrent_writes_any_order(self):
        h = [w(1, 0, 10), w(2, 1, 9), r(1, 11, 12), r(1, 13, 14)]
        self.assertTrue(ok(h))
        h = [w(1, 0, 10), w(2, 1, 9), r(2, 11, 12)]
        self.assertTrue(ok(h))

    def test_failed_write_may_apply_late_or_never(self):
        # A failed write may take effect long after its error was returned...
        self.assertTrue(ok([w(1, 0, 1), w(2, 2, 3, ok=False), r(1, 4, 5), r(2, 6, 7)]))
        # ...or never.
        self.assertTrue(ok([w(1, 0, 1), w(2, 2, 3, ok=False), r(1, 4, 5), r(1, 6, 7)]))

    def test_keys_are_independent(self):
        self.assertTrue(ok([w(1, 0, 1, k="a"), w(2, 0, 1, k="b"), r(1, 2, 3, k="a"), r(2, 2, 3, k="b")]))

    def test_random_sequential_histories_pass(self):
        rng = random.Random(7)
        for _ in range(50):
            h, t, cur = [], 0, 0
            for i in range(60):
                if rng.random() < 0.5:
                    cur = i + 1
                    h.append(w(cur, t, t + 1))
                else:
                    h.append(r(cur, t, t + 1))
                t += 2
            self.assertTrue(ok(h))

    def test_random_concurrent_register_passes(self):
        # Simulate a real atomic register with overlapping ops: each op takes effect at a
        # random instant inside [call, ret].
        rng = random.Random(11)
        for _ in range(20):
            events = []
            for i in range(40):
                call = rng.uniform(0, 100)
                ret = call + rng.uniform(0.1, 8)
                at = rng.uniform(call, ret)
                events.append((at, call, ret, "w" if rng.random() < 0.5 else "r", i + 1))
            events.sort()
            cur, h = 0, []
            for at, call, ret, kind, v in events:
                if kind == "w":
                    cur = v
                    h.append(w(v, call, ret))
                else:
                    h.append(r(cur, call, ret))
            self.assertTrue(ok(h))


class Bad(unittest.TestCase):
    def test_stale_read_after_ack(self):
        res = check_history([w(1, 0, 1), w(2, 2, 3), r(1, 4, 5)])
        self.assertEqual(len(res["violations"]), 1)
        self.assertEqual(res["violations"][0]["reason"], "not linearizable")
        self.assertTrue(res["violations"][0]["witnesses"], "a stale read is named")

    def test_lost_acknowledged_write(self):
        # Acknowledged, then the final read shows the initial value: data loss.
        self.assertFalse(ok([w(7, 0, 1), r(0, 5, 6)]))

    def test_read_going_back_in_time(self):
        # Two reads after the write: new value, then old value again.
        self.assertFalse(ok([w(1, 0, 1), w(2, 2, 20), r(2, 3, 4), r(1, 5, 6)]))

    def test_failed_write_seen_then_unseen(self):
        # A write that failed was read, then disappeared while nothing else was written.
        self.assertFalse(ok([w(1, 0, 1), w(2, 2, 3, ok=False), r(2, 4, 5), r(1, 6, 7)]))

    def test_first_failure_points_at_the_stale_read(self):
        h = [w(1, 0, 1), r(1, 2, 3), w(2, 4, 5), r(2, 6, 7), r(1, 8, 9), w(3, 10, 11), r(3, 12, 13)]
        v = check_history(h)["violations"][0]
        self.assertEqual(v["first_failure_at"], 9, "when the stale read returned")
        self.assertEqual(v["ops_before_failure"][-1]["call"], 8)

    def test_value_never_written(self):
        res = check_history([w(1, 0, 1), r(9, 2, 3)])
        self.assertEqual(res["violations"][0]["reason"], "read a value never written")

    def test_torn(self):
        res = check_history([w(1, 0, 1), r("torn:1,2", 2, 3)])
        self.assertEqual(res["violations"][0]["reason"], "torn read (block mixes writes)")

    def test_only_bad_key_reported(self):
        res = check_history([w(1, 0, 1, k="a"), r(1, 2, 3, k="a"), w(1, 0, 1, k="b"), r(0, 2, 3, k="b")])
        self.assertEqual([v["key"] for v in res["violations"]], ["b"])

    def test_random_histories_with_one_stale_read_fail(self):
        rng = random.Random(3)
        for _ in range(20):
            h, t, vals = [], 0, [0]
            for i in range(40):
                vals.append(i + 1)
                h.append(w(i + 1, t, t + 1))
                t += 2
            # A read well after everything that returns an old, overwritten value.
            h.append(r(rng.choice(vals[:-1]), t + 5, t + 6))
            self.assertFalse(ok(h))


if __name__ == "__main__":
    unittest.main()
