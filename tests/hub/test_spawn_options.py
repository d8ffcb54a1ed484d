"""The hub's spawn options, through its REST API (as a script or a hand-made request would send them): a value
outside the form's choices is refused with a message naming the field and never reaches sbatch."""

from __future__ import annotations

import pytest
from hub_helpers import api, server_jobs, server_of, stop_server

pytestmark = pytest.mark.slurm

USER = "bob"


@pytest.mark.parametrize(("options", "message"), [
    ({"gpus": 3, "time_min": 30}, "gpus: 3 is not allowed here; choose one of 0, 1, 2, 4"),
    ({"gpus": 0, "time_min": 10000}, "time_min: 10000 is not allowed here; choose one of 30, 60, 120"),
    ({"gpus": "1; scancel -u ada", "time_min": 30}, "gpus: '1; scancel -u ada' is not a whole number"),
    ({"gpus": 0}, "time_min: missing"),
])
def test_options_outside_the_choices_are_refused(hub: str, options: dict, message: str) -> None:
    stop_server(USER)
    status, body = api("POST", f"/users/{USER}/server", options)
    assert status == 400, f"{options}: {status} {body}"
    assert message in body["message"], body
    assert server_of(USER) is None and server_jobs(USER) == [], "a refused spawn reached Slurm"
