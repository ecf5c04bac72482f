"""The public Python API: every name in ``neffcache.__all__`` resolves, ``neffcache.restore``
and ``neffcache.precompile`` stay the functions once their packages' modules are loaded,
``help()`` documents the calls, and ``import neffcache`` loads nothing heavy."""

from __future__ import annotations

import importlib
import importlib.util
import pydoc
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import neffcache
from neffcache.faces import exported, module_name

ROOT = Path(neffcache.__file__).resolve().parents[1]


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


def test_importing_every_face_is_light() -> None:
    heavy = ("torch", "diffusers", "sqlalchemy", "boto3", "botocore", "fastapi", "obstore")
    faces = [".".join(p.relative_to(ROOT).parent.parts) for p in _faces_tool().faces()]
    code = (f"import importlib, sys\nfor f in {faces!r}: importlib.import_module(f)\n"
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
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


def _faces_tool() -> ModuleType:
    """tools/faces.py, the generator of the faces' imports for type checkers."""
    spec = importlib.util.spec_from_file_location("faces_tool", ROOT / "tools" / "faces.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_every_face_loads_each_name_its_table_names() -> None:
    """A lazy face loads each name of its ``_FACE`` table from the module the table names; its
    ``__all__`` holds them all, an unknown name is an AttributeError, and its imports for
    type checkers are what ``tools/faces.py`` writes from the table (the check CI runs)."""
    tool = _faces_tool()
    paths = tool.faces()
    assert len(paths) >= 6
    assert tool.drifted() == []
    for path in paths:
        name = ".".join(path.relative_to(ROOT).parent.parts)
        importlib.import_module(name)
        face = sys.modules[name]
        homes = exported(face._FACE)
        assert set(face.__all__) >= set(homes), name
        for export, (module, original) in homes.items():
            source = importlib.import_module(module_name(name, module))
            assert getattr(face, export) is getattr(source, original), (name, export)
        try:
            face.no_such_name  # noqa: B018 - the attribute access is the test
        except AttributeError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError(f"{name}.no_such_name resolved")


def test_the_faces_check_fails_when_a_face_drifts(tmp_path: Path) -> None:
    tool = _faces_tool()
    face = ROOT / "neffcache" / "restore" / "__init__.py"
    text = face.read_text(encoding="utf-8")
    drifted = text.replace("    from neffcache.restore.ready import cell_ready\n", "")
    assert drifted != text
    copy = tmp_path / "neffcache" / "restore" / "__init__.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(drifted, encoding="utf-8")
    assert tool.drifted(tmp_path / "neffcache") == [copy]
    copy.write_text(text, encoding="utf-8")
    assert tool.drifted(tmp_path / "neffcache") == []
