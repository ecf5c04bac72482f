"""``neffcache retire`` and ``neffcache prune``: remove entries by policy, plan first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import ask, finish, human_bytes, progress
from neffcache.cli._options import ranged, shared, workers_option, yes_option
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.lifecycle import RetireEntriesResult
    from neffcache.restore import PruneResult


@click.command("retire", epilog=EXIT_CODE_HELP)
@click.option("--keep-sdk-versions", "keep_sdk_versions",
              type=ranged("RetireEntriesRequest", "keep_sdk_versions"), default=None,
              metavar="K", help="Keep the entries of the newest K SDK versions per backend "
              "[config: [retire] keep_sdk_versions].")
@click.option("--keep-matrix", "keep_matrices", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="Keep every entry of this matrix's cells, "
              "whatever its SDK version (repeatable) [config: [retire] keep_matrices].")
@click.option("--keep-restored-days", "keep_restored_days",
              type=ranged("RetireEntriesRequest", "keep_restored_days"), default=None,
              metavar="D", help="Keep every entry of each fingerprint an ok/partial restore "
              "report (ingested into the index) found entries of in the last D days; needs "
              "the index [config: [retire] keep_restored_days].")
@click.option("--dry-run", is_flag=True, help="Only print the plan: what goes, the bytes freed.")
@yes_option("Retire")
@click.option("--reason", default="", metavar="TEXT",
              help="Why, for the record (default: the policy).")
@click.option("--by", "by", default=None, metavar="NAME",
              help="Who, for the record [default: USER@HOST].")
@workers_option("RetireEntriesRequest", 16, "Parallel manifest reads.")
@shared("store", "index", "json")
def retire(as_json: bool, **params: Any) -> None:
    """Retire the entries a policy does not keep; `neffcache gc` then frees their blobs.

    An entry is kept when any rule keeps it: its SDK version (for neuron the versions of
    neuronx-cc, torch-neuronx, NKI, libneuronxla and torch in its fingerprint; for inductor
    torch's) is one of the newest K of its backend (--keep-sdk-versions K), its cell is a
    cell of a --keep-matrix FILE, or its fingerprint was restored in the last D days
    (--keep-restored-days D: an ok or partial restore report ingested into the index found
    an entry of that fingerprint; run `neffcache reports ingest` or `neffcache reindex`
    first, or keep `neffcache serve` running). Every other entry of the store is retired.
    Flags beat the config file's [retire] table (keep_sdk_versions = K, keep_matrices =
    [FILE, ...], keep_restored_days = D); a retire with no rule at all is refused (exit 2),
    and so is --keep-restored-days without an index (none configured and no embedded one).

    The plan is computed first and printed (--dry-run stops there): the SDK versions found,
    the entries kept and retired, and the bytes gc will free (blobs only retired entries
    reference). Then a record is written to the store (retired/<time>-<id>.json: who, when,
    why, the policy, the entries), and each retired entry's cell pointer and manifest are
    deleted. Blobs are left to `neffcache gc`, which spares the blobs of entries retired
    less than its --grace ago, so a restore that read a manifest just before it was retired
    still completes. When an index is configured (or the embedded one exists) the retired
    entries are removed from it too; a failing index is only a warning (`neffcache reindex`
    repairs it).

    --json prints: policy (keep_sdk_versions, keep_matrices, keep_restored_days,
    keep_fingerprints), sdk_versions (backend, sdk, label, kept), keep (entry_key, cell_id,
    cell_key, fingerprint_key, backend, sdk, bytes, kept_by: the rules that keep it, of
    "sdk_version", "matrix", "restored"), retire (the same without kept_by), entries_kept,
    entries_retired, blobs_freed, bytes_freed, dry_run, record (the record's key; null on a
    dry run), store.

    \b
    Examples:
      neffcache retire --keep-sdk-versions 2 --dry-run
      neffcache retire --keep-sdk-versions 2 --keep-matrix prod.toml --yes --reason "SDK 2.26"
      neffcache retire --keep-sdk-versions 1 --store s3://bucket/neff --json --dry-run
      neffcache retire --keep-sdk-versions 1 --keep-restored-days 7 --dry-run
      neffcache retire --yes && neffcache gc --yes     # policy from the config file
    """
    from neffcache.lifecycle import RetireEntriesRequest, retire_entries

    result = retire_entries(RetireEntriesRequest(**params, confirm=_ask, notice=progress))
    finish(result, as_json, lambda: _text(result))


def _ask(preview: RetireEntriesResult) -> bool:
    plan = preview.plan
    what = (f"retire {len(plan.retire)} of {len(plan.retire) + len(plan.keep)} entries "
            f"({human_bytes(plan.bytes_freed)} freed by the next gc)")
    return ask(f"{what[0].upper()}{what[1:]} from {preview.store}?", f"would {what}",
               hint="neffcache retire ... --dry-run, then the same with --yes")


def _text(result: RetireEntriesResult) -> str:
    from neffcache.lifecycle import sdk_label

    plan, dry_run, record = result.plan, result.dry_run, result.record
    lines = [f"policy: {plan.policy.describe()}"]
    lines += [f"  {'keep  ' if kept else 'retire'}  {backend:8}  {sdk_label(version)}"
              for backend, version, kept in plan.sdk_versions]
    lines += [f"keep {e.entry_key[:12]}  {e.cell_id}  [fingerprint "
              f"{e.fingerprint_key[:12]} restored lately]"
              for e, rules in zip(plan.keep, plan.kept_by, strict=True) if rules == ("restored",)]
    verb = "would retire" if dry_run else "retired"
    lines += [f"{verb} {e.entry_key[:12]}  {e.cell_id}  [fingerprint {e.fingerprint_key[:12]}]"
              for e in plan.retire]
    lines.append(f"{'dry run: ' if dry_run else ''}{len(plan.retire)} entries retired, "
                 f"{len(plan.keep)} kept; {plan.blobs_freed} blobs "
                 f"({human_bytes(plan.bytes_freed)}) freed by the next `neffcache gc`"
                 + (f"; record {record}" if record else ""))
    return "\n".join(lines)


@click.command("prune", epilog=EXIT_CODE_HELP)
@click.argument("to", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--matrix", "matrix", required=True, metavar="MATRIX",
              type=click.Path(dir_okay=False), help="The matrix whose entries stay.")
@click.option("--dry-run", is_flag=True, help="Only print what would be removed.")
@yes_option("Remove")
@shared("python", "json")
def prune(as_json: bool, **params: Any) -> None:
    """Remove from DIR the entries MATRIX and this host's fingerprint no longer need.

    A persistent restore destination keeps every entry ever restored into it: restoring
    fingerprint A, then B (a new SDK, other compiler flags) leaves A's files beside B's. An
    entry is kept when it is the entry of a cell of MATRIX for this host's fingerprint (read
    with --python, as restore reads it; an unknown neuron target is refused, exit 5, as restore
    refuses it); every other manifest copy in DIR/.neffcache-entries is
    pruned: its files leave the cache roots (a file a kept entry also wants stays; a file
    changed since its restore, or behind a symlink, is left alone and counted as skipped),
    directories left empty go, the state file stops vouching for the removed paths, and the
    copy goes last (an interrupted prune is safe to rerun).

    Plan first: --dry-run prints what would go, and without --yes a terminal is asked. prune
    holds DIR's restore lock while it removes anything: while a restore runs into DIR it
    refuses (exit 1) and touches nothing.

    --json prints: target, fingerprint_key, dry_run, kept, pruned (entry_key, cell_id,
    fingerprint_key, files, bytes), files_to_remove, bytes_to_remove, files_shared, unreadable,
    removed, bytes_removed, skipped.

    \b
    Examples:
      neffcache prune /var/cache/neffcache --matrix matrix.toml --dry-run
      neffcache prune /var/cache/neffcache --matrix matrix.toml --yes --json
      neffcache prune /mnt/cache --matrix matrix.toml --python /opt/venv/bin/python --yes
    """
    from neffcache.restore import PruneRequest
    from neffcache.restore import prune as call

    result = call(PruneRequest(**params, confirm=_ask_prune))
    finish(result, as_json, lambda: _prune_text(result))


def _ask_prune(preview: PruneResult) -> bool:
    return ask(f"Remove {len(preview.pruned)} entry(ies), {len(preview.remove)} file(s) "
               f"({human_bytes(preview.bytes_to_remove)}) from {preview.target}?",
               f"prune would remove {len(preview.pruned)} entry(ies) and "
               f"{len(preview.remove)} file(s)",
               f"neffcache prune {preview.target} --matrix MATRIX --yes (or --dry-run to look)")


def _prune_text(r: PruneResult) -> str:
    lines = [f"{'would remove' if r.dry_run else 'pruned'} {len(r.pruned)} entry(ies) from "
             f"{r.target}; kept {len(r.kept)} for fingerprint {r.fingerprint_key[:12]}"]
    for p in r.pruned:
        lines.append(f"  {p.cell_id}  {p.fingerprint_key[:12]}  {p.files} file(s), "
                     f"{human_bytes(p.bytes)}")
    if r.dry_run:
        lines.append(f"files: {len(r.remove)} to remove ({human_bytes(r.bytes_to_remove)}), "
                     f"{r.shared} shared with kept entries stay")
    else:
        lines.append(f"files: {r.removed} removed ({human_bytes(r.bytes_removed)}), "
                     f"{r.shared} shared with kept entries kept, {r.skipped} skipped (changed "
                     "or gone)")
    if r.unreadable:
        lines.append(f"left alone: {len(r.unreadable)} manifest copy(ies) that do not read "
                     "as this backend's")
    return "\n".join(lines)
