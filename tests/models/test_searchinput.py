"""The search body is declared once (issue 63 #2): models.searchinput.SearchSweepInput is what the OpenAPI document
shows and what the API checks a search with after its own checks (jobs.searchspace.parse)."""

from models.searchinput import problems

BASE = {"model": "lenet", "dataset": "synthetic"}


def test_a_body_the_model_takes_has_no_problems_and_one_it_refuses_names_each_field():
    good = {"base": BASE, "search": "tpe", "space": {"params.lr": {"loguniform": [1e-4, 1.0]}}, "seed": 3}
    assert problems(good) == {}
    bad = {**good, "space": {"params.lr": {"loguniform": [1e-4]}}, "seed": -1, "colour": "red"}
    found = problems(bad)
    assert set(found) == {"space.params.lr.loguniform.1", "seed", "colour"}, found  # (its high end missing)
    assert "greater than or equal to 0" in found["seed"] and "not permitted" in found["colour"]
