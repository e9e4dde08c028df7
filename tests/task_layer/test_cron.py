"""Tests for nobroker.tasks.cron and the periodic schedules: next and previous times.

Every expected time here was worked out by hand from a calendar (December
2026 starts on a Tuesday), not computed by the code under test.
"""

from __future__ import annotations

import unittest
from datetime import UTC, datetime, timedelta

import support  # noqa: F401  (puts src/ on sys.path)

from nobroker.tasks import Cron, Schedule, tick_job_id


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def show(t: float | None) -> str:
    return "never" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


class CronNextTest(unittest.TestCase):
    def expect_next(self, expression: str, after: str, expected: str) -> None:
        got = Cron.parse(expression).next_after(at(after))
        self.assertEqual(show(got), expected, f"{expression!r} after {after}")

    def test_steps_ranges_and_weekday_names(self) -> None:
        # Friday 4 Dec 2026 17:50: the last slot of the day is gone; Monday 7 Dec opens at 09:00.
        self.expect_next("*/15 9-17 * * mon-fri", "2026-12-04 17:50", "2026-12-07 09:00")
        self.expect_next("*/15 9-17 * * mon-fri", "2026-12-04 17:44:59", "2026-12-04 17:45")

    def test_next_is_strictly_after_even_on_a_matching_minute(self) -> None:
        self.expect_next("@hourly", "2026-12-01 09:00", "2026-12-01 10:00")
        self.expect_next("*/5 * * * *", "2026-12-01 09:05:00", "2026-12-01 09:10")

    def test_a_step_from_a_start_value_runs_to_the_end_of_the_field(self) -> None:
        self.expect_next("5/20 * * * *", "2026-12-01 09:45", "2026-12-01 10:05")
        self.expect_next("5/20 * * * *", "2026-12-01 09:05", "2026-12-01 09:25")

    def test_both_day_fields_restricted_match_either_one(self) -> None:
        # The 1st OR a Monday: after Tue 1 Dec comes Mon 7 Dec; after Mon 28 Dec, Fri 1 Jan.
        self.expect_next("0 0 1 * mon", "2026-12-01 00:00", "2026-12-07 00:00")
        self.expect_next("0 0 1 * mon", "2026-12-28 00:00", "2027-01-01 00:00")

    def test_a_day_field_starting_with_a_star_must_match_as_well(self) -> None:
        # Odd dates AND Mondays: 7 Dec is both; 14 Dec is even; 21 Dec is next.
        self.expect_next("0 0 */2 * mon", "2026-12-06 00:00", "2026-12-07 00:00")
        self.expect_next("0 0 */2 * mon", "2026-12-07 00:00", "2026-12-21 00:00")

    def test_weekday_7_and_sun_are_sunday(self) -> None:
        for expression in ("0 12 * * 7", "0 12 * * 0", "0 12 * * SUN"):
            self.expect_next(expression, "2026-12-01 00:00", "2026-12-06 12:00")

    def test_a_weekday_range_with_a_step(self) -> None:
        # Monday, Wednesday, Friday: after Mon 7 Dec 00:00 comes Wed 9 Dec.
        self.expect_next("0 0 * * 1-5/2", "2026-12-07 00:00", "2026-12-09 00:00")
        self.expect_next("0 0 * * 1-5/2", "2026-12-11 00:00", "2026-12-14 00:00")

    def test_month_names_in_any_case_and_lists(self) -> None:
        self.expect_next("0 9 * JAN-mar,Dec *", "2026-12-31 09:00", "2027-01-01 09:00")
        self.expect_next("0 9 * JAN-mar,Dec *", "2027-03-31 09:00", "2027-12-01 09:00")

    def test_short_months_and_leap_days(self) -> None:
        self.expect_next("30 23 31 * *", "2026-11-01 00:00", "2026-12-31 23:30")
        self.expect_next("30 23 31 * *", "2026-12-31 23:30", "2027-01-31 23:30")
        self.expect_next("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00")

    def test_year_rollover(self) -> None:
        self.expect_next("0 0 1 1 *", "2026-12-31 23:59", "2027-01-01 00:00")
        self.expect_next("@yearly", "2027-01-01 00:00", "2028-01-01 00:00")


class CronPreviousTest(unittest.TestCase):
    def expect_latest(self, expression: str, at_or_before: str, expected: str) -> None:
        got = Cron.parse(expression).latest_at_or_before(at(at_or_before))
        self.assertEqual(show(got), expected, f"{expression!r} at or before {at_or_before}")

    def test_the_moment_itself_counts_when_it_matches(self) -> None:
        self.expect_latest("*/5 * * * *", "2026-12-01 09:05:00", "2026-12-01 09:05")
        self.expect_latest("*/5 * * * *", "2026-12-01 09:04:59", "2026-12-01 09:00")

    def test_back_across_days_months_and_years(self) -> None:
        self.expect_latest("30 4 * * sun", "2026-12-01 09:03", "2026-11-29 04:30")
        self.expect_latest("0 0 1 1 *", "2027-06-01 00:00", "2027-01-01 00:00")
        self.expect_latest("0 0 29 2 *", "2027-06-01 00:00", "2024-02-29 00:00")
        self.expect_latest("0 0 1 * mon", "2026-12-06 12:00", "2026-12-01 00:00")


class CronErrorsTest(unittest.TestCase):
    def test_bad_expressions_name_the_field_and_the_problem(self) -> None:
        cases = {
            "* * *": "5 fields",
            "61 * * * *": "minute field '61': 61 is outside 0-59",
            "* 24 * * *": "hour field",
            "* * 0 * *": "day of month field '0'",
            "* * * 13 *": "month field '13'",
            "* * * * 8": "day of week field '8'",
            "*/0 * * * *": "step",
            "5-1 * * * *": "backwards",
            "x * * * *": "'x' is not a number 0-59",
            "* * * foo *": "or a name (jan...)",
            "1,,2 * * * *": "minute field ''",
            "0 0 30 2 *": "never matches",
        }
        for expression, needle in cases.items():
            with self.subTest(expression=expression):
                with self.assertRaises(ValueError) as caught:
                    Cron.parse(expression)
                self.assertIn(needle, str(caught.exception))
                self.assertEqual(len(str(caught.exception).splitlines()), 1)

    def test_a_non_string_is_a_type_error(self) -> None:
        with self.assertRaises(TypeError):
            Cron.parse(5)  # type: ignore[arg-type]


class ScheduleTest(unittest.TestCase):
    def test_every_is_aligned_to_the_epoch(self) -> None:
        every = Schedule.of(None, 60)
        self.assertEqual(every.next_after(at("2026-12-01 09:03:30")), at("2026-12-01 09:04"))
        self.assertEqual(every.next_after(at("2026-12-01 09:04")), at("2026-12-01 09:05"))
        self.assertEqual(every.latest_at_or_before(at("2026-12-01 09:04")),
                         at("2026-12-01 09:04"))
        self.assertEqual(Schedule.of(None, timedelta(minutes=1)), every)

    def test_exactly_one_of_cron_and_every(self) -> None:
        for cron, every in ((None, None), ("* * * * *", 60)):
            with self.assertRaises(ValueError):
                Schedule.of(cron, every)
        for bad in (0, -1, float("inf")):
            with self.assertRaises(ValueError):
                Schedule.of(None, bad)
        with self.assertRaises(TypeError):
            Schedule.of(None, "60")  # type: ignore[arg-type]

    def test_tick_job_ids_name_the_task_and_the_scheduled_time_in_utc(self) -> None:
        self.assertEqual(tick_job_id("app.cleanup", at("2026-12-01 09:05")),
                         "periodic:app.cleanup:2026-12-01T09:05:00Z")
        self.assertEqual(tick_job_id("t", at("2026-12-01 09:05") + 0.25),
                         "periodic:t:2026-12-01T09:05:00.250000Z")


if __name__ == "__main__":
    unittest.main()
