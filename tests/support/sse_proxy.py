"""An S3 endpoint on 127.0.0.1 that enforces a bucket policy "deny PutObject without
server-side encryption": a reverse proxy in front of another S3 server (moto) that answers
403 AccessDenied to a PutObject, CopyObject or CreateMultipartUpload lacking the
``x-amz-server-side-encryption`` header (an UploadPart or CompleteMultipartUpload carries none,
as on AWS: the upload was allowed when it was created), and forwards everything else. It
records the encryption headers and storage class of every write it let through."""

from __future__ import annotations

from urllib.parse import urlsplit

from tests.support.forward_proxy import ForwardingHandler, LoopbackProxy

DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
          b"<Message>Access Denied</Message></Error>")
SSE = "x-amz-server-side-encryption"
KMS_KEY = "x-amz-server-side-encryption-aws-kms-key-id"
STORAGE_CLASS = "x-amz-storage-class"


class SseRequiredProxy(LoopbackProxy):
    """In front of ``upstream`` (http://host:port); use ``url`` as the S3 endpoint."""

    def __init__(self, upstream: str) -> None:
        super().__init__(_Handler)
        self.upstream = urlsplit(upstream).netloc
        self.denied: list[str] = []  # "METHOD path" of each refused write
        self.writes: list[tuple[str, str, str | None, str | None, str | None]] = []
        # (method, path, sse, kms key id, storage class) of each object write let through

    def judge(self, method: str, path: str, query: str, headers: dict[str, str]) -> bool:
        """Whether the request may go on; records writes and refusals."""
        names = {part.partition("=")[0] for part in query.split("&")}
        creates = (method == "PUT" and "partNumber" not in names and path.count("/") >= 2) \
            or (method == "POST" and "uploads" in names)
        if not creates:
            return True
        with self._lock:
            if SSE not in headers:
                self.denied.append(f"{method} {path}")
                return False
            self.writes.append((method, path, headers[SSE], headers.get(KMS_KEY),
                                headers.get(STORAGE_CLASS)))
            return True


class _Handler(ForwardingHandler):
    def _forward(self) -> None:
        proxy: SseRequiredProxy = self.server.proxy  # type: ignore[attr-defined]
        target = urlsplit(f"http://{proxy.upstream}{self.path}")
        body = self.read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        if not proxy.judge(self.command, target.path, target.query, headers):
            self.answer(403, "Forbidden", [("Content-Type", "application/xml")], DENIED)
            return
        self.answer(*self.ask_upstream(target, body))

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        pass
