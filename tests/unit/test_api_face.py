"""The public Python API: every name in ``neffcache.__all__`` resolves, ``neffcache.restore``
and ``neffcache.precompile`` stay the functions once their packages' modules are loaded,
``help()`` documents the calls, and ``import neffcache`` loads nothing heavy."""

from __future__ import annotations

import pydoc
import subprocess
import sys

import neffcache


def test_every_public_name_resolves() -> None:
    missing = [n for n in neffcache.__all__ if getattr(neffcache, n, None) is None]
    assert missing == []
    assert set(dir(neffcache)) >= set(neffcache.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        neffcache.no_such_call  # noqa: B018 - the attribute access is the test
    except AttributeError as exc:
        assert "no_such_call" in str(exc)
    else:
        raise AssertionError("neffcache.no_such_call resolved")


def test_restore_and_precompile_are_the_calls_not_the_packages() -> None:
    import neffcache.precompile.run  # noqa: F401 - loading submodules must not rebind them
    import neffcache.restore.session  # noqa: F401

    assert callable(neffcache.restore) and neffcache.restore.__name__ == "restore"
    assert callable(neffcache.precompile) and neffcache.precompile.__name__ == "precompile"
    assert neffcache.verify is neffcache.verify_store


def test_help_documents_the_calls() -> None:
    text = pydoc.render_doc(neffcache.restore, renderer=pydoc.plaintext)
    assert "RestoreRequest" in text and "exit_code" in text
    fields = pydoc.render_doc(neffcache.RestoreRequest, renderer=pydoc.plaintext)
    assert "deadline" in fields and "report_to" in fields
    for name in ("precompile", "coverage", "verify", "list_entries", "push"):
        assert (getattr(neffcache, name).__doc__ or "").strip(), name


def test_import_neffcache_is_light() -> None:
    heavy = ("torch", "diffusers", "sqlalchemy", "boto3", "botocore", "fastapi", "obstore")
    code = f"import sys, neffcache; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


def test_every_result_knows_its_exit_code_and_its_json() -> None:
    results = [n for n in neffcache.__all__ if n.endswith(("Result", "Preview"))]
    assert len(results) >= 20
    lacking = [n for n in results
               if not isinstance(getattr(getattr(neffcache, n), "exit_code", None), property)
               or not callable(getattr(getattr(neffcache, n), "to_json", None))
               or not callable(getattr(getattr(neffcache, n), "error", None))]
    assert lacking == []


def test_the_index_face_loads_each_name_from_the_module_its_imports_name() -> None:
    """``neffcache.index`` loads names on first use (``_EXPORTS``); its imports for type
    checkers name the same modules and names, and ``__all__`` lists them all."""
    import ast
    from pathlib import Path

    import neffcache.index as face

    tree = ast.parse(Path(face.__file__).read_text())
    typed = {(node.module, alias.asname or alias.name)
             for block in tree.body if isinstance(block, ast.If)
             for node in ast.walk(block) if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    lazy = {(f"neffcache.index.{m}", n) for m, names in face._EXPORTS.items() for n in names}
    assert typed == lazy
    assert set(face.__all__) == {n for _, n in lazy}
    assert all(getattr(face, n) is not None for n in face.__all__)
    try:
        face.no_such_name  # noqa: B018 - the attribute access is the test
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("neffcache.index.no_such_name resolved")
