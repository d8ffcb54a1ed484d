"""Pseudonyms: short, lower-case, safe in job names."""

import pytest

from coursekit.labs.kit.participant import choose_pseudonym, job_name


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
