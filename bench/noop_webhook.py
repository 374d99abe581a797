"""The floor of bench_load's end-to-end figures: a webhook that decides nothing.

It answers every AdmissionReview allowed, with its uid, from the project's own server
(`webhook.httpserver`, TLS with the same client CA), so that the latency prune-gate adds to a
DELETE through kube-apiserver can be told apart from what any webhook costs: the API server's
call, TLS, HTTP, JSON. Run: `python -m bench.noop_webhook --port P --cert-dir DIR [--client-ca F]`
(the directory gets ca.crt, tls.crt and tls.key; ready once ca.crt is there).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from webhook import tls
from webhook.http2 import ALPN_PROTOCOLS
from webhook.httpbase import Limits
from webhook.httpserver import HttpsServer
from webhook.serve import CertReloader, listen_socket


def allow_everything(
    environ: dict[str, Any], start_response: Callable[..., Any]
) -> Iterable[bytes]:
    size = int(environ.get("CONTENT_LENGTH") or 0)
    try:
        uid = json.loads(environ["wsgi.input"].read(size))["request"]["uid"]
    except (ValueError, KeyError, TypeError):
        start_response("400 Bad Request", [("Content-Type", "application/json")])
        return [b'{"error": "not an AdmissionReview"}']
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(body).encode()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", type=Path, required=True)
    parser.add_argument("--client-ca")
    args = parser.parse_args()
    ca = tls.make_ca("bench no-op webhook CA")
    cert, key = args.cert_dir / "tls.crt", args.cert_dir / "tls.key"
    args.cert_dir.mkdir(parents=True, exist_ok=True)
    tls.write_pair(tls.make_serving_cert(ca, ["127.0.0.1"]), cert, key)
    reloader = CertReloader(cert, key, client_ca_file=args.client_ca, alpn=ALPN_PROTOCOLS)
    server = HttpsServer(allow_everything, reloader.context, Limits())
    sock = listen_socket("127.0.0.1", args.port)
    (args.cert_dir / "ca.crt").write_bytes(ca.cert_pem)
    server.run(sock)


if __name__ == "__main__":
    main()
