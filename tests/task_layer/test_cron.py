"""Tests for nobroker.tasks.cron and the periodic schedules: next and previous times.

Every expected time here was worked out by hand from a calendar (December
2026 starts on a Tuesday), not computed by the code under test.
"""

from __future__ import annotations

import importlib.util
import unittest
import zoneinfo
from datetime import UTC, datetime, timedelta

import harness.support  # noqa: F401  (puts src/ on sys.path)

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


def _fired_minute_by_minute(cron: Cron, where: zoneinfo.ZoneInfo, start: float,
                            hours: int) -> list[float]:
    """Vixie cron's rule applied to each real minute in turn (see tasks/zones.py)."""
    fired = []
    previous = datetime.fromtimestamp(start, where).replace(tzinfo=None)
    for minute in range(1, hours * 60 + 1):
        t = start + 60 * minute
        local = datetime.fromtimestamp(t, where)
        wall = local.replace(tzinfo=None)
        if cron.matches(wall) and (not cron.fixed_time or local.fold == 0):
            fired.append(t)  # fold 1 is the second pass of a repeated minute
        elif cron.fixed_time and wall - previous > timedelta(minutes=1):
            skipped = previous + timedelta(minutes=1)  # the clocks jumped over these
            while skipped < wall:
                if cron.matches(skipped):
                    fired.append(t)
                    break
                skipped += timedelta(minutes=1)
        previous = wall
    return fired


HAVE_TZDATA = bool(zoneinfo.available_timezones())
needs_tzdata = unittest.skipUnless(HAVE_TZDATA, "no time zone database on this system")


@needs_tzdata
class CronInAZoneTest(unittest.TestCase):
    """Europe/Paris in 2026: the clocks go from 02:00 CET to 03:00 CEST on Sunday 29
    March (01:00 UTC) and from 03:00 CEST back to 02:00 CET on Sunday 25 October
    (01:00 UTC), so 02:00-02:59 happens at 00:00-00:59 UTC and again at 01:00-01:59
    UTC. America/New_York goes back from 02:00 EDT to 01:00 EST on Sunday 1 November
    (06:00 UTC). Expected times are UTC."""

    def expect_next(self, expression: str, tz: str, after: str, expected: str) -> None:
        got = Cron.parse(expression, tz).next_after(at(after))
        self.assertEqual(show(got), expected, f"{expression!r} in {tz} after {after} UTC")

    def expect_latest(self, expression: str, tz: str, at_or_before: str,
                      expected: str) -> None:
        got = Cron.parse(expression, tz).latest_at_or_before(at(at_or_before))
        self.assertEqual(show(got), expected,
                         f"{expression!r} in {tz} at or before {at_or_before} UTC")

    def series(self, expression: str, tz: str, after: str, count: int) -> list[str]:
        cron, t, found = Cron.parse(expression, tz), at(after), []
        for _ in range(count):
            t = cron.next_after(t)  # type: ignore[assignment]
            found.append(show(t))
        return found

    def test_the_fields_are_read_on_the_zones_wall_clock_in_winter_and_summer(self) -> None:
        self.expect_next("0 9 * * *", "Europe/Paris", "2026-12-01 00:00", "2026-12-01 08:00")
        self.expect_next("0 9 * * *", "Europe/Paris", "2026-07-01 00:00", "2026-07-01 07:00")
        self.expect_latest("0 9 * * mon", "America/New_York", "2026-12-01 00:00",
                           "2026-11-30 14:00")
        self.expect_next("0 9 * * *", "UTC", "2026-12-01 00:00", "2026-12-01 09:00")

    def test_a_fixed_time_the_clocks_skip_fires_once_at_the_first_minute_after_the_jump(
            self) -> None:
        # 02:30 does not exist on 29 March: it fires at 03:00 CEST, as Vixie cron does.
        self.assertEqual(self.series("30 2 * * *", "Europe/Paris", "2026-03-28 00:00", 3),
                         ["2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"])
        self.expect_latest("30 2 * * *", "Europe/Paris", "2026-03-29 01:30",
                           "2026-03-29 01:00")
        self.expect_latest("30 2 * * *", "Europe/Paris", "2026-03-29 00:59",
                           "2026-03-28 01:30")
        # Two skipped times and the first one after the jump are one tick, not three.
        self.assertEqual(self.series("0,30 2 * * *", "Europe/Paris", "2026-03-29 00:00", 2),
                         ["2026-03-29 01:00", "2026-03-30 00:00"])
        self.assertEqual(self.series("0 2,3 * * *", "Europe/Paris", "2026-03-29 00:00", 2),
                         ["2026-03-29 01:00", "2026-03-30 00:00"])

    def test_a_fixed_time_the_clocks_repeat_fires_once_at_its_first_pass(self) -> None:
        self.assertEqual(self.series("30 2 * * *", "Europe/Paris", "2026-10-24 12:00", 2),
                         ["2026-10-25 00:30", "2026-10-26 01:30"])
        self.expect_latest("30 2 * * *", "Europe/Paris", "2026-10-25 01:45",
                           "2026-10-25 00:30")
        self.assertEqual(self.series("30 1 * * *", "America/New_York", "2026-10-31 12:00", 2),
                         ["2026-11-01 05:30", "2026-11-02 06:30"])

    def test_a_star_schedule_follows_the_clock_through_both_changes(self) -> None:
        # Hourly stays hourly in real time: no 02:00 in March, two of them in October.
        self.assertEqual(self.series("0 * * * *", "Europe/Paris", "2026-03-28 23:30", 3),
                         ["2026-03-29 00:00", "2026-03-29 01:00", "2026-03-29 02:00"])
        self.assertEqual(self.series("0 * * * *", "Europe/Paris", "2026-10-24 23:30", 3),
                         ["2026-10-25 00:00", "2026-10-25 01:00", "2026-10-25 02:00"])
        # After 02:30 CEST the next is 02:00 CET: an earlier wall time, a later instant.
        self.expect_next("0 * * * *", "Europe/Paris", "2026-10-25 00:30", "2026-10-25 01:00")
        self.expect_latest("0 * * * *", "Europe/Paris", "2026-10-25 01:30",
                           "2026-10-25 01:00")
        self.expect_latest("0 * * * *", "Europe/Paris", "2026-10-25 00:59",
                           "2026-10-25 00:00")
        # A star in the hour field: 02:15 is skipped in March, run twice in October.
        self.assertEqual(self.series("15 * * * *", "Europe/Paris", "2026-03-29 00:00", 2),
                         ["2026-03-29 00:15", "2026-03-29 01:15"])
        self.assertEqual(self.series("15 * * * *", "Europe/Paris", "2026-10-25 00:00", 2),
                         ["2026-10-25 00:15", "2026-10-25 01:15"])

    def test_the_search_agrees_with_a_minute_by_minute_walk_of_real_time(self) -> None:
        # The rule read the slow way: every real minute across each change, its local
        # wall time, whether it exists once, twice or (after a jump) stands for the
        # skipped ones. The search walks wall time with shortcuts; both must agree.
        nights = [("Europe/Paris", "2026-03-28 18:00"), ("Europe/Paris", "2026-10-24 18:00"),
                  ("America/New_York", "2026-10-31 22:00"),
                  ("Australia/Lord_Howe", "2026-04-04 10:00")]  # a 30-minute change
        expressions = ["*/20 * * * *", "0 * * * *", "*/20 2 * * *", "30 2 * * *", "0,30 1-3 * * *",
                       "15 2 * * sun", "45 1 25 10 *", "59 23 * * *"]
        for tz, start in nights:
            where = zoneinfo.ZoneInfo(tz)
            for expression in expressions:
                with self.subTest(tz=tz, expression=expression):
                    cron = Cron.parse(expression, tz)
                    expected = _fired_minute_by_minute(cron, where, at(start), hours=14)
                    got, t = [], at(start)
                    while True:
                        t = cron.next_after(t)  # type: ignore[assignment]
                        if t > at(start) + 14 * 3600:
                            break
                        got.append(t)
                    self.assertEqual([show(x) for x in got], [show(x) for x in expected])
                    for probe in range(int(at(start)) + 7 * 60, int(at(start)) + 14 * 3600,
                                       37 * 60):
                        before = [x for x in expected if x <= probe]
                        if before:
                            self.assertEqual(show(cron.latest_at_or_before(probe)),
                                             show(before[-1]), f"at or before {show(probe)}")

    def test_a_bad_zone_is_refused_naming_it(self) -> None:
        for bad in ("Europe/Pariss", "utc", "", "../etc/passwd", "/etc/localtime"):
            with self.subTest(tz=bad):
                with self.assertRaises(ValueError) as caught:
                    Cron.parse("0 9 * * *", bad)
                self.assertIn(repr(bad), str(caught.exception))
        with self.assertRaises(TypeError):
            Cron.parse("0 9 * * *", 1)  # type: ignore[arg-type]
        with self.assertRaises(ValueError) as caught:
            Schedule.of(None, 60, "Europe/Paris")
        self.assertIn("tz= is for cron=", str(caught.exception))

    def test_without_a_tz_database_the_error_says_so(self) -> None:
        if importlib.util.find_spec("tzdata") is not None:
            self.skipTest("the tzdata package is installed: a database is always there")
        zoneinfo.reset_tzpath(to=[])
        zoneinfo.ZoneInfo.clear_cache()
        self.addCleanup(zoneinfo.ZoneInfo.clear_cache)
        self.addCleanup(zoneinfo.reset_tzpath)
        with self.assertRaises(ValueError) as caught:
            Cron.parse("0 9 * * *", "Europe/Paris")
        self.assertIn("'Europe/Paris': this system has no time zone database",
                      str(caught.exception))

    def test_a_schedule_says_its_zone(self) -> None:
        self.assertEqual(str(Schedule.of("0 9 * * *", None, "Europe/Paris")),
                         "cron '0 9 * * *' in Europe/Paris")
        self.assertEqual(str(Schedule.of("0 9 * * *", None)), "cron '0 9 * * *'")


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
