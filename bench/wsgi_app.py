"""The webhook's app as a production WSGI server loads it, for bench_load's comparison of servers.

`create()` builds in each worker process what `gate webhook serve` builds in each of its workers
(`webhook.cli._start_worker`): the webhook's app around its own watch cache and Event queue,
from the same command-line options, given as a JSON list in PRUNE_GATE_BENCH_SERVE. So granian's
and gunicorn's workers serve the very app the project's server serves, and only the server differs.
The server's own TLS serves the certificate (the options' --cert-file/--key-file are read for the
app's certificate metrics only); nothing here registers or watches a registration.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: The environment variable with `gate webhook serve`'s arguments, a JSON list.
SERVE_ARGS = "PRUNE_GATE_BENCH_SERVE"


def create() -> Any:
    from webhook import jsonlog
    from webhook.cli import _checked_options, _start_worker, serve
    from webhook.serve import CertReloader

    jsonlog.configure()
    args = json.loads(os.environ[SERVE_ARGS])
    ctx = serve.make_context("serve", list(args))
    options = _checked_options(ctx.params)
    assert options.cert_file and options.key_file, "give --cert-file and --key-file"
    reloader = CertReloader(options.cert_file, options.key_file, client_ca_file=options.client_ca)
    _services, app = _start_worker(options, reloader, None, primary=True)
    return app
