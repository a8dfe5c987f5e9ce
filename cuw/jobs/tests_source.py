"""Where a recipe's upstream tests (``verify.tests``) come from: the fetcher the verify gate calls.

The tests' tree is brought the way a source is (:func:`cuw.jobs.sources.materialize`): the
recipe's own source, or ``verify.tests.source`` (a git tag checked against its commit, from the
run's ``--git-mirror`` / ``$CUW_GIT_MIRROR`` when set, a tarball checked against its
``archive_sha256``; an sdist checked against its sha256; a folder of the recipes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cuw.base.settings import Settings
from cuw.config.recipe import Recipe, tests_recipe
from cuw.jobs.sources import materialize
from cuw.wheel.upstream_tests import Fetch


def tests_fetcher(recipe: Recipe, settings: Settings) -> Optional[Fetch]:
    """The verify gate's fetcher of ``recipe``'s tests (with the run's ``settings``: its source
    cache and git mirror), or None when it declares none."""
    if not recipe.verify.tests.paths:
        return None
    source = tests_recipe(recipe)

    def fetch(dest: Path) -> Path:
        return materialize(source, dest, settings=settings)

    return fetch
