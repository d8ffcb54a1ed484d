import pytest

from coursekit.labs.lab10_resilience import transfer


def test_steps_redone_are_those_since_the_last_checkpoint():
    assert transfer.steps_redone(3_940, 250) == 190
    assert transfer.steps_redone(3_750, 250) == 0  # killed right after a checkpoint
    assert transfer.minutes_lost(3_940, 250, 1.2) == pytest.approx(3.8)


@pytest.mark.parametrize("args", [(10, 0), (-1, 5)])
def test_bad_input_names_the_parameter(args):
    with pytest.raises(ValueError, match="killed_at_step|checkpoint_every"):
        transfer.steps_redone(*args)
