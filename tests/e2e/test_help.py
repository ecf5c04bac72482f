"""Every command this part of neffcache adds has man-page help with examples and exit codes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from neffcache.cli import group


@pytest.mark.parametrize("command", ["push", "restore", "verify", "gc", "fingerprint"])
def test_help_has_examples_and_exit_codes(command: str) -> None:
    result = CliRunner().invoke(group, [command, "--help"])
    assert result.exit_code == 0
    text = result.output
    assert "Examples:" in text
    assert f"neffcache {command}" in text.split("Examples:")[1]
    assert "Exit codes" in text and "4  integrity failure" in text
    assert "--json" in text
