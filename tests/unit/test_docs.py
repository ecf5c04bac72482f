"""Docs that cannot drift: every command is in the README and has help with examples."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from neffcache.cli import COMMANDS, LazyGroup, group
from neffcache.errors import EXIT_CODE_HELP, EXIT_CODES

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_in_the_readme(name: str) -> None:
    assert f"`neffcache {name}" in README


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_with_examples(name: str) -> None:
    ctx = click.Context(group)
    cmd = LazyGroup.get_command(group, ctx, name)  # type: ignore[arg-type]
    assert cmd is not None
    text = cmd.get_help(click.Context(cmd, info_name=name))
    assert "Examples:" in text or isinstance(cmd, click.Group)
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            sub_help = sub.get_help(click.Context(sub, info_name=sub.name))
            assert "Examples:" in sub_help, f"neffcache {name} {sub.name} lacks examples"


def test_every_exit_code_is_documented() -> None:
    for code in set(EXIT_CODES.values()):
        assert f"  {code}  " in EXIT_CODE_HELP
        assert f"| {code} |" in README
