"""How a rate window copied by `nobroker migrate` merges into the target's
(nobroker.window_copies): every backend's import_windows keeps what these return."""

from __future__ import annotations

import unittest

from nobroker.limits import Window
from nobroker.window_copies import CopiedWindow, merged_starts, merged_window


class MergedWindowTest(unittest.TestCase):
    def test_a_window_merged_with_a_copy_of_itself_is_unchanged_equal_starts_kept(self
                                                                                  ) -> None:
        starts = [10.0, 20.0, 20.0]  # a lease of two jobs starts them at one time
        self.assertEqual(merged_starts(starts, starts, 3), starts)
        copy = CopiedWindow("k", 3, 60.0, tuple(starts))
        once = merged_window(None, copy)
        twice = merged_window(once, copy)
        self.assertEqual((twice.count, twice.period, list(twice.starts)),
                         (3, 60.0, starts))

    def test_the_latest_starts_of_both_under_the_kept_period_and_the_larger_count(self
                                                                                  ) -> None:
        kept = Window(2, 3600.0, [5.0, 30.0])
        merged = merged_window(kept, CopiedWindow("k", 3, 1.0, (10.0, 20.0, 40.0)))
        self.assertEqual((merged.count, merged.period, list(merged.starts)),
                         (3, 3600.0, [20.0, 30.0, 40.0]))
        self.assertEqual(merged_starts([1.0], [2.0, 3.0], 1), [3.0])


if __name__ == "__main__":
    unittest.main()
