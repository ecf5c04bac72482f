"""``neffcache keys``: make a signing key, show the public key a fleet trusts."""

from __future__ import annotations

import click

from neffcache.cli._common import finish
from neffcache.cli._options import Group, shared
from neffcache.errors import EXIT_CODE_HELP


@click.group("keys", cls=Group, epilog=EXIT_CODE_HELP)
def keys() -> None:
    """Signing keys for entries (Ed25519).

    Publishing (precompile, push, capture) signs each manifest with the key in
    --signing-key FILE (or NEFFCACHE_SIGNING_KEY_FILE); a restore given trusted public keys
    (--trusted-key, NEFFCACHE_TRUSTED_KEYS) refuses an entry that is unsigned or signed by another
    key (exit 4). Trust several keys at once to rotate: publish with the new one, then drop the
    old key once its entries are retired. Give instances that back-fill (`neffcache capture`) a
    key of their own, so a fleet can trust CI's key alone.
    """


@keys.command("generate", epilog=EXIT_CODE_HELP)
@click.option("--out", "out", metavar="FILE", required=True, type=click.Path(dir_okay=False),
              help="The private key file to create (mode 0600; never overwritten). Keep it "
                   "where only the publisher can read it (a CI secret).")
@click.option("--public-out", "public_out", metavar="FILE", default=None,
              type=click.Path(dir_okay=False),
              help="Also write the public key (one ed25519: line) to FILE.")
@shared("json")
def generate(out: str, public_out: str | None, as_json: bool) -> None:
    """Make a new Ed25519 signing key; print its public key and key id.

    --json prints: public_key, key_id, path.

    \b
    Examples:
      neffcache keys generate --out /secure/ci-signing.pem --public-out ci.pub
      neffcache keys generate --out instance.pem --json
    """
    from neffcache.keys import GenerateKeyRequest, generate_key

    result = generate_key(GenerateKeyRequest(out=out, public_out=public_out))
    finish(result, as_json, lambda: f"{result.public_key}\nkey id {result.key_id} "
                                    f"(private key in {result.path})")


@keys.command("show", epilog=EXIT_CODE_HELP)
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@shared("json")
def show(path: str, as_json: bool) -> None:
    """Print the public key (and key id) of a private key file or a public key file.

    --json prints: public_key, key_id, path.

    \b
    Examples:
      neffcache keys show /secure/ci-signing.pem
      neffcache keys show ci.pub --json
    """
    from neffcache.keys import ShowKeyRequest, show_key

    result = show_key(ShowKeyRequest(path=path))
    finish(result, as_json, lambda: f"{result.public_key}\nkey id {result.key_id}")
