"""Pseudonyms: short, lower-case, safe in job names."""

import pytest

from coursekit.labs.kit import participant
from coursekit.labs.kit.participant import check_pseudonym, choose_pseudonym, job_name


@pytest.fixture(autouse=True)
def own_home(tmp_path, monkeypatch):
    """Every test here has its own config folder: choosing a pseudonym never writes the real one."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv(participant.PSEUDONYM_ENV, raising=False)
    return tmp_path


@pytest.mark.parametrize("good", ["a", "ada", "kim42", "zz9zz"])
def test_good_pseudonyms_pass(good):
    assert choose_pseudonym(good) == good


@pytest.mark.parametrize("bad, words", [("", "empty"), ("toolong", "at most 5"), ("Ada", "lower-case"),
                                        ("a b", "lower-case"), ("4ada", "starting with a letter"),
                                        ("a-b", "no spaces, dashes"), ("a\nb", "lower-case"), (42, "string")])
def test_bad_pseudonyms_name_the_parameter(bad, words):
    with pytest.raises(ValueError, match="pseudonym") as caught:
        choose_pseudonym(bad)
    assert words in str(caught.value)


def test_job_name_prefixes_the_pseudonym():
    assert job_name("ada", "bs") == "ada-bs"
    with pytest.raises(ValueError):
        job_name("Nope!", "bs")


def test_a_pseudonym_chosen_once_is_the_next_labs_default(own_home, monkeypatch):
    monkeypatch.setattr(participant.getpass, "getuser", lambda: "student07")
    assert choose_pseudonym() == "stt07"  # nothing chosen yet: made from the login name
    assert choose_pseudonym("kim") == "kim"
    assert (own_home / "coursekit" / "pseudonym").read_text() == "kim\n"
    assert choose_pseudonym() == "kim"
    monkeypatch.setenv(participant.PSEUDONYM_ENV, "zed")
    assert choose_pseudonym() == "zed"  # the environment overrides what was remembered
    monkeypatch.setenv(participant.PSEUDONYM_ENV, "Not OK")
    with pytest.raises(ValueError, match=r"\$COURSEKIT_PSEUDONYM 'Not OK'"):
        choose_pseudonym()


@pytest.mark.parametrize("login, expected", [("ada", "ada"), ("student07", "stt07"), ("Jean.Dupont", "jeont"),
                                             ("42", "p"), ("x_y", "xy")])
def test_a_login_name_becomes_a_valid_pseudonym(login, expected):
    made = participant.from_login(login)
    assert made.startswith(expected) and check_pseudonym(made) == made


def test_a_job_prefix_error_says_job_prefix():
    with pytest.raises(ValueError, match="job_prefix 'Dl-9'"):
        check_pseudonym("Dl-9", what="job_prefix")
