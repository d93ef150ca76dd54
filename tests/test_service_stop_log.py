"""What a stop cut, read from the unit's journal as systemd and sglang 0.5.9 write it (``host/service.py``)."""

from paths import UNIT
from sglfleet.host.service import cut_in_log

# sglang 0.5.9 tokenizer_manager.py:2139-2141, then systemd 252's lines for a stop past TimeoutStopSec.
WATCHDOG = ("Gracefully exiting... Remaining number of requests {n}. "
            "Remaining requests remaining_rids=['9f1c2e7a0b', '41aa07c3d2'].")
TIMED_OUT = [
    f"{UNIT}: State 'stop-sigterm' timed out. Killing.",
    f"{UNIT}: Killing process 4121 (python3) with signal SIGKILL.",
    f"{UNIT}: Main process exited, code=killed, status=9/KILL",
    f"{UNIT}: Failed with result 'timeout'.",
]


def test_a_stop_that_drained_in_time_cut_nothing():
    lines = [WATCHDOG.format(n=2), WATCHDOG.format(n=0), f"{UNIT}: Deactivated successfully."]
    assert cut_in_log(lines) is None


def test_a_stop_past_its_timeout_cut_what_the_watchdog_last_counted():
    lines = [f"Stopping {UNIT} - SGLang...", WATCHDOG.format(n=3), WATCHDOG.format(n=2), *TIMED_OUT]
    assert cut_in_log(lines) == 2


def test_a_stop_killed_before_the_watchdog_spoke_cut_an_unknown_number_shown_as_zero():
    assert cut_in_log([f"Stopping {UNIT} - SGLang...", *TIMED_OUT]) == 0
