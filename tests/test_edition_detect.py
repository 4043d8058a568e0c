"""Telling a student's checkout's edition and release (cs336report.editions.detect), on checkouts
we write: tests/fixtures/course_repo and student_repo (2025 adapters), course_repo_2026 (2026
adapters, a changelog), and variants made in a temporary folder."""

from pathlib import Path

import pytest

from cs336report import editions

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _checkout(root: Path, adapters: str, changelog: str | None = None, pyproject: str | None = None) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "adapters.py").write_text(adapters)
    if changelog is not None:
        (root / "CHANGELOG.md").write_text(changelog)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    return root


ADAPTERS_2025 = "def get_ddp_bucketed(module, bucket_size_mb):\n    raise NotImplementedError\n"
ADAPTERS_2026 = "def get_fsdp(module, compute_dtype=None):\n    raise NotImplementedError\n"


@pytest.mark.parametrize("fixture", ["course_repo", "student_repo"])
def test_the_2025_fixtures_are_2025_with_no_release_of_the_course(fixture):
    edition, release = editions.detect(FIXTURES / fixture)
    assert edition.id == 2025
    assert release is None  # their pyproject.toml says 0.0.0, their own package's version


def test_the_2026_fixture_is_2026_at_its_changelogs_release():
    edition, release = editions.detect(FIXTURES / "course_repo_2026")
    assert (edition.id, release) == (2026, "26.1.4")
    assert edition.tests_release(release) == "26.1.4"
    assert [s.name for s in edition.test_suites(release)] == ["attention", "ddp", "fsdp", "sharded_optimizer"]


def test_the_changelog_wins_over_a_lagging_pyproject(tmp_path):
    root = _checkout(tmp_path, ADAPTERS_2025, "# Changelog\n\n## [1.0.3] - 2025-04-24\n- x\n\n## [1.0.2]\n",
                     '[project]\nversion = "1.0.2"\n')
    assert editions.read_release(root) == ("1.0.3", "CHANGELOG.md")
    assert editions.detect(root)[1] == "1.0.3"


def test_pyproject_gives_the_release_where_no_changelog_does(tmp_path):
    root = _checkout(tmp_path, ADAPTERS_2026, None, '[project]\nname = "x"\nversion = "26.1.0"\n')
    assert editions.read_release(root) == ("26.1.0", "pyproject.toml")
    assert editions.detect(root)[1] == "26.1.0"


def test_an_adapter_imported_from_the_students_package_counts(tmp_path):
    root = _checkout(tmp_path, "from cs336_systems.fsdp import get_fsdp, gather as fsdp_gather_full_params\n")
    assert editions.detect(root)[0].id == 2026


def test_a_checkout_of_no_edition_names_the_file_and_the_adapters_that_tell_one(tmp_path):
    root = _checkout(tmp_path, "def get_rmsnorm_autograd_function_pytorch():\n    raise NotImplementedError\n")
    with pytest.raises(editions.DetectionError) as err:
        editions.detect(root)
    text = str(err.value)
    assert text.startswith(f"{root / 'tests' / 'adapters.py'} matches no edition")
    assert "2025: get_ddp_individual_parameters" in text and "2026: get_ddp, ddp_on_after_backward" in text


def test_adapters_of_both_editions_are_an_error(tmp_path):
    root = _checkout(tmp_path, ADAPTERS_2025 + ADAPTERS_2026)
    with pytest.raises(editions.DetectionError, match="several editions .2025: get_ddp_bucketed; 2026: get_fsdp"):
        editions.detect(root)


def test_a_changelog_of_the_other_edition_is_an_error_naming_it(tmp_path):
    root = _checkout(tmp_path, ADAPTERS_2025, "## [26.1.1] - 2026-04-20\n")
    with pytest.raises(editions.DetectionError) as err:
        editions.detect(root)
    assert str(err.value).startswith(f"{root / 'CHANGELOG.md'} says 26.1.1, but ")
    assert "whose releases are 1.0.x" in str(err.value)


def test_a_checkout_not_of_the_configs_edition_is_an_error():
    with pytest.raises(editions.DetectionError, match="is the 2026 edition .* not the 2025 edition the config names"):
        editions.detect(FIXTURES / "course_repo_2026", expected=2025)
    assert editions.detect(FIXTURES / "course_repo_2026", expected=2026)[0].id == 2026


def test_a_missing_or_broken_adapters_file_names_it(tmp_path):
    with pytest.raises(editions.DetectionError, match=r"tests/adapters.py: not found"):
        editions.detect(tmp_path)
    root = _checkout(tmp_path / "broken", "def get_fsdp(:\n")
    with pytest.raises(editions.DetectionError, match=r"adapters.py: line 1: not valid Python"):
        editions.detect(root)
