"""Restore a matrix's entries from the store alone: resolve, plan, fetch, install, judge.

Modules, top to bottom (each imports only those below it; see ARCHITECTURE.md): ``run`` the
whole restore · ``preview`` its plan, for --dry-run · ``local`` the store-free "already in
place" check · ``outcome`` result and exit rule · ``resolve`` manifests from the store ·
``apply`` runs the plan's units · ``fetch`` one unit · ``install`` one file, atomically ·
``scan`` what is in place · ``state`` the per-root state file · ``plan`` the whole plan
(pure) · ``fs`` file-system primitives.
"""
