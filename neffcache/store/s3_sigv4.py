"""AWS Signature Version 4 for S3 requests without a body (GET, HEAD): pure, no I/O.

What the botocore-free read client signs with. The canonical form follows the S3 flavour of
SigV4: the path is URI-encoded once (``/`` kept), query keys and values are encoded and sorted,
and the payload hash of a bodiless request is the sha256 of the empty string.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A derived key: valid for one access key, day, region and service."""

    access_key: str
    day: str  # YYYYMMDD
    region: str
    key: bytes = field(repr=False)

    @property
    def scope(self) -> str:
        return f"{self.day}/{self.region}/s3/aws4_request"


def derive_key(access_key: str, secret_key: str, day: str, region: str) -> SigningKey:
    k = _hmac(("AWS4" + secret_key).encode(), day)
    for part in (region, "s3", "aws4_request"):
        k = _hmac(k, part)
    return SigningKey(access_key, day, region, k)


def canonical_path(path: str) -> str:
    """The URI-encoded absolute path S3 signs and the request line carries."""
    return quote(path, safe="/~")


def canonical_query(params: Sequence[tuple[str, str]]) -> str:
    pairs = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in params)
    return "&".join(f"{k}={v}" for k, v in pairs)


def sign_headers(method: str, host: str, path: str, params: Sequence[tuple[str, str]],
                 headers: Mapping[str, str], key: SigningKey, amz_date: str,
                 token: str | None = None) -> dict[str, str]:
    """The headers to send: ``headers`` plus Host, X-Amz-Date, X-Amz-Content-Sha256, the
    session token if any, and Authorization. ``amz_date`` is ``YYYYMMDDTHHMMSSZ`` (UTC) on the
    day of ``key``. Every header passed in is signed."""
    out = {k.lower(): " ".join(v.split()) for k, v in headers.items()}
    out["host"] = host
    out["x-amz-date"] = amz_date
    out["x-amz-content-sha256"] = EMPTY_SHA256
    if token:
        out["x-amz-security-token"] = token
    names = sorted(out)
    signed = ";".join(names)
    request = "\n".join([
        method,
        canonical_path(path),
        canonical_query(params),
        "".join(f"{n}:{out[n]}\n" for n in names),
        signed,
        EMPTY_SHA256,
    ])
    to_sign = "\n".join([ALGORITHM, amz_date, key.scope,
                         hashlib.sha256(request.encode()).hexdigest()])
    signature = hmac.new(key.key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["authorization"] = (f"{ALGORITHM} Credential={key.access_key}/{key.scope}, "
                            f"SignedHeaders={signed}, Signature={signature}")
    return out


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()
