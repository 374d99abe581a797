"""The admission webhook: the kube-apiserver's door onto prune-gate's rule engine.

`webhook.app.create_app` is its WSGI app; `webhook.httpserver` serves it over TLS, in one process
or in several (`webhook.workers`); `webhook.serve` reloads its certificates;
`webhook.cache` keeps the live state it decides with. See `gate webhook serve --help`.
"""
