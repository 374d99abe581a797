"""The admission webhook: the kube-apiserver's door onto prune-gate's rule engine.

`webhook.app.create_app` is the Flask app; `webhook.serve` runs it in gunicorn over TLS;
`webhook.cache` keeps the live state it decides with. See `gate webhook serve --help`.
"""
