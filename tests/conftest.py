"""Suite-wide set-up: no test may open a connection beyond this machine (see offline.py)."""

from tests import offline


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook signature
    offline.install()
