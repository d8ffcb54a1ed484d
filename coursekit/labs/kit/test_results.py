"""ResultsTable: columns, filtering, printing."""

import pytest

from coursekit.labs.kit.results import ResultsTable, column_label, format_value


def make_table() -> ResultsTable:
    return ResultsTable([
        {"batch_size": 64, "images_per_s": 1234.5678, "oom": False, "steps": [1, 2]},
        {"batch_size": 16, "images_per_s": 400.0, "oom": False, "steps": [1]},
        {"batch_size": 256, "images_per_s": None, "oom": True},
    ], title="sweep")


def test_columns_skip_lists_and_keep_first_seen_order():
    assert make_table().columns == ["batch_size", "images_per_s", "oom"]


def test_column_where_sorted_one():
    table = make_table()
    assert table.column("batch_size") == [64, 16, 256]
    assert table.where(oom=True).column("batch_size") == [256]
    assert table.where(lambda r: r["batch_size"] < 100).column("batch_size") == [64, 16]
    assert table.sorted_by("batch_size").column("batch_size") == [16, 64, 256]
    assert table.sorted_by("images_per_s").column("batch_size") == [16, 64, 256]  # None last
    assert table.one(batch_size=16)["images_per_s"] == 400.0
    with pytest.raises(ValueError, match="expected one row"):
        table.one(oom=False)
    with pytest.raises(KeyError, match="no column 'nope'"):
        table.column("nope")


def test_text_is_aligned_and_formats_values():
    text = make_table().with_columns("batch_size", "images_per_s", "oom").to_text()
    lines = text.splitlines()
    assert lines[0] == "sweep"
    assert lines[1].split() == ["batch_size", "images_per_s", "oom"]
    assert len({len(line) for line in lines[1:]}) == 1  # every line as wide as the header
    assert lines[3].split() == ["64", "1235", "no"]
    assert lines[5].split() == ["256", "-", "yes"]


def test_add_column():
    table = make_table().with_columns("batch_size")
    table.add_column("double", lambda r: 2 * r["batch_size"])
    assert table.column("double") == [128, 32, 512]
    assert table.columns == ["batch_size", "double"]


@pytest.mark.parametrize("value, text", [(0.123456, "0.123"), (12.3456, "12.3"), (123456.0, "1.23e+05"),
                                         (1e-7, "1.00e-07"), (None, "-"), (3, "3"), (float("nan"), "nan"),
                                         (0.0, "0")])
def test_format_value(value, text):
    assert format_value(value) == text


@pytest.mark.parametrize("name, words", [("images_per_s_median", "images/s (median)"), ("val_acc", "validation accuracy"),
                                         ("total_time_s", "total time (s)"), ("gradients_mb", "gradients (MiB)"),
                                         ("weights_gb", "weights (GB)"),
                                         ("state", "state"), ("num_workers", "loader workers")])
def test_column_label(name, words):
    assert column_label(name) == words


def test_html_view_has_readable_headers_escaped_cells_and_the_title():
    table = make_table().with_columns("batch_size", "images_per_s", "oom")
    table.append({"batch_size": "<b>", "images_per_s": 1.0, "oom": False})
    page = table._repr_html_()
    assert page.startswith("<table") and "<caption" in page and ">sweep<" in page
    assert ">batch size</th>" in page and ">images/s</th>" in page and "title='images_per_s'" in page
    assert ">1235</td>" in page and ">yes</td>" in page and "&lt;b&gt;" in page
    assert page.count("<tr>") == 1 + len(table) and "white-space:nowrap" in page


def test_a_column_of_sentences_wraps_in_html_and_keeps_wrapping_through_where_and_with_columns():
    table = ResultsTable([{"rank": 1, "marks": "a long sentence " * 10}], wrap=("marks",))
    for shown in (table, table.where(rank=1), table.with_columns("rank", "marks"), table.sorted_by("rank")):
        cells = shown.to_html().split("<td ")[1:]
        assert "white-space:nowrap" in cells[0] and "white-space:normal" in cells[1]
    assert "white-space:normal" not in ResultsTable([{"marks": "x"}]).to_html()
