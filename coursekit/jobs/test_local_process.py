"""local_process.interrupt: SIGINT, then SIGTERM, then SIGKILL to what is still the same process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from coursekit.jobs.local_process import interrupt

# seconds, not tenths: Python must handle SIGINT and exit before SIGTERM comes, on a busy 2-core machine too
GRACE_S = 3.0
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_interrupt_escalates_to_what_the_process_does_not_ignore() -> None:
    # the polite one gets SIGINT's default even where pytest inherited it ignored (a background job of a script)
    polite = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deaf = subprocess.Popen([sys.executable, "-c", DEAF], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert polite.stdout.readline() == deaf.stdout.readline() == "ready\n"
        started = time.monotonic()
        interrupt([polite.pid, deaf.pid], grace_s=GRACE_S)
        assert polite.wait(2 * GRACE_S + 30) == -signal.SIGINT  # KeyboardInterrupt: Python ends by SIGINT itself
        assert deaf.wait(2 * GRACE_S + 30) == -signal.SIGKILL  # SIGINT and SIGTERM ignored
        assert time.monotonic() - started >= 2 * GRACE_S  # two graces passed before the SIGKILL
    finally:
        polite.kill()
        deaf.kill()


def test_interrupt_of_a_process_already_gone_does_nothing() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    interrupt([done.pid], grace_s=0.1)  # no error, no signal to whatever has that pid later
