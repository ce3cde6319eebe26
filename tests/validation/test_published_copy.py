"""The vendored copy of the published tables must equal shared/validation/ when it is present."""

from pathlib import Path

import pytest

from tests.conftest import PUBLISHED, ROOT

SHARED = ROOT.parent / "shared" / "validation"


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared/ is not beside this checkout")
def test_copy_matches_shared():
    for src in sorted(SHARED.glob("*.csv")):
        copy = PUBLISHED / src.name
        assert copy.is_file(), f"{src.name} missing from scenarios/validation/published"
        assert copy.read_bytes() == Path(src).read_bytes(), f"{src.name} drifted"
