"""scripts/mutants.py itself: every seeded bug (the list in scripts/mutations/) still has its
site, and the list is sound.

A mutation whose code text moved or changed would make ``scripts/mutants.py`` stop (exit 2)
before testing anything; this module finds that in the fast tier, on the checkout, without
running a mutant (standard library only: no TensorFlow).
"""

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = []  # library and TFX environments alike, fast: neither slow nor tfx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_mutants():
    spec = importlib.util.spec_from_file_location(
        "ga_tfx_mutants_script", os.path.join(ROOT, "scripts", "mutants.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mutants = _load_mutants()


def test_the_list_has_unique_names_and_no_bug_twice():
    assert mutants.list_problems() == []
    assert len(mutants.MUTATIONS) >= 50  # the list does not shrink unnoticed


@pytest.mark.source_tree
@pytest.mark.parametrize("mutation", mutants.MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_finds_its_site_where_it_is_listed(mutation):
    assert mutants.anchor_problems(ROOT, mutation) == []


def test_a_moved_or_duplicated_site_and_a_repeated_bug_are_reported(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    (tmp_path / "m.py").write_text("a = 1\nb = 2\nb = 2\n")

    def mutation(
        name="area.what", find="a = 1", replace="a = 2", count=1, tests=("tests/test_x.py",)
    ):
        return mutants.Mutation(name, "m.py", find, replace, tests, count=count)

    assert mutants.anchor_problems(str(tmp_path), mutation()) == []
    assert mutants.anchor_problems(str(tmp_path), mutation(find="b = 2", count=2)) == []
    (moved,) = mutants.anchor_problems(str(tmp_path), mutation(find="c = 3"))
    assert "occurs 0 times in m.py, listed 1" in moved
    (duplicated,) = mutants.anchor_problems(str(tmp_path), mutation(find="b = 2"))
    assert "occurs 2 times" in duplicated
    (broken,) = mutants.anchor_problems(str(tmp_path), mutation(replace="a = ("))
    assert "does not compile" in broken
    (no_test,) = mutants.anchor_problems(str(tmp_path), mutation(tests=("tests/test_y.py",)))
    assert "tests/test_y.py does not exist" in no_test
    gone = mutants.Mutation("area.gone", "gone.py", "x", "y", ("tests/test_x.py",))
    assert mutants.anchor_problems(str(tmp_path), gone) == ["area.gone: gone.py does not exist"]

    problems = mutants.list_problems(
        [mutation(), mutation(name="area.other"), mutation(), mutation(name="nodot", replace="z")]
    )
    assert problems == [
        "area.other: the same bug as area.what",
        "area.what: the name is listed twice",
        "area.what: the same bug as area.what",
        "nodot: name it area.what",
    ]


def test_a_sample_is_drawn_by_its_seed_alone():
    fast = [m for m in mutants.MUTATIONS if not m.slow]
    first = mutants.draw_sample(fast, 4, "e998c2b")
    assert len(first) == 4 and len({m.name for m in first}) == 4
    assert mutants.draw_sample(fast, 4, "e998c2b") == first
    assert [m for m in fast if m in first] == first  # the list's order
    draws = {tuple(m.name for m in mutants.draw_sample(fast, 4, seed)) for seed in "abcdef"}
    assert len(draws) > 1  # another commit draws other mutations
    assert mutants.draw_sample(fast, len(fast) + 5, "x") == fast


@pytest.mark.slow  # one collection of the whole suite (about 20 s)
def test_every_fast_mutation_has_a_fast_test_to_kill_it():
    """A mutation not marked slow runs with ``-m "not slow"`` (and in CI's sample): its
    selection must hold fast tests. Moving its killers to the slow tier (tests/tiers.py) would
    leave it running nothing (exit 5) or only tests that cannot fail."""
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    fast = [line.strip() for line in collected.splitlines() if "::" in line]
    assert len(fast) > 300, collected[-2000:]
    empty = [m.name for m in mutants.MUTATIONS if not m.slow and not mutants.selected(m, fast)]
    assert empty == []
