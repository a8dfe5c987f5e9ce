"""Where a recipe's upstream tests (``verify.tests``) come from: the fetcher the verify gate calls.

The tests' tree is brought the way a source is (:func:`cuw.jobs.sources.materialize`): the
recipe's own source, or ``verify.tests.source`` (a git tag checked against its commit, from the
run's ``--git-mirror`` / ``$CUW_GIT_MIRROR`` when set, a tarball checked against its
``archive_sha256``; an sdist checked against its sha256; a folder of the recipes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from cuw.base.errors import CuwError
from cuw.base.settings import Settings
from cuw.config.recipe import Recipe, Source, recipe_of_tests
from cuw.jobs.sources import materialize
from cuw.wheel.upstream_tests import Fetch


def upstream_fetch(recipe: Recipe, settings: Settings) -> Optional[Fetch]:
    """The verify gate's fetcher of ``recipe``'s tests (with the run's ``settings``: its source
    cache and git mirror), or None when it declares none."""
    if not recipe.verify.tests.paths:
        return None
    source = recipe_of_tests(recipe)
    own = recipe.verify.tests.source == Source()

    def fetch(dest: Path) -> Path:
        try:
            return materialize(source, dest, settings=settings)
        except CuwError as exc:
            if own:
                raise
            # The fetcher's messages name source.<key>: here that is verify.tests.source.<key>.
            raise type(exc)(re.sub(r"(?<![\w/.-])source\.(?=\w)", "verify.tests.source.", str(exc))) from None

    return fetch
