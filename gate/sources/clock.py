"""The one calendar date of every door: today, in UTC.

An exemption's `expires` is a date, and it must end at the same instant for `gate check` on a CI
runner in any time zone and for the webhook in its pod: so every door asks the date here, of the
UTC clock, never of the local one (`date.today()` on a runner in UTC+14 would end an exemption a
day before the webhook does). The engine itself reads no clock: callers pass it this date.
"""

from __future__ import annotations

import datetime as dt


def utc_date(moment: dt.datetime) -> dt.date:
    """The UTC calendar date of a moment (a naive one is taken to be UTC already)."""
    return moment.astimezone(dt.UTC).date() if moment.tzinfo is not None else moment.date()


def utc_today() -> dt.date:
    """Today's date in UTC: the date exemptions expire by, in `gate check` and the webhook."""
    return utc_date(dt.datetime.now(dt.UTC))


def utc_now() -> dt.datetime:
    """This instant, timezone-aware: what `gate doctor` and `gate heal` measure waiting by."""
    return dt.datetime.now(dt.UTC)
