"""`gate audit --live`: the guarded claims whose data a deletion would destroy.

Thin: parse, read the cluster (`gate.kube.audit`), judge (`gate.engine.audit`), print
(`gate.report.audit`). Exit 0 when the cluster was read, whatever it holds: the audit is a
report, not a gate; 2 when it cannot be read, never a silent "nothing at risk".
"""

from __future__ import annotations

import sys

import click

from gate.cli.common import POLICY_FILE, fail, kube_options, say, text_or_json_option
from gate.model.errors import GateError

#: Exit code of an audit that was read (whatever it found).
EXIT_READ = 0


def _namespace(
    namespace: str | None, all_namespaces: bool, kubeconfig: str | None, context: str | None
) -> str | None:
    """The namespace to read, as kubectl picks it: -n, else -A (None: all), else the context's."""
    if namespace and all_namespaces:
        raise click.UsageError("give -n NAMESPACE or -A, not both")
    if all_namespaces:
        return None
    if namespace:
        return namespace
    from gate.kube.client import context_namespace

    return context_namespace(kubeconfig, context)


@click.command("audit")
@click.option(
    "--live",
    is_flag=True,
    help="Read the cluster (required: the audit judges live claims, volumes and snapshots).",
)
@click.option("-n", "--namespace", help="Namespace to audit (default: the context's, as kubectl).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Audit every namespace.")
@kube_options
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help=f"Policy file (default: ./{POLICY_FILE} if present): its guardedKinds and live settings.",
)
@text_or_json_option
def audit_command(
    live: bool,
    namespace: str | None,
    all_namespaces: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    config_path: str | None,
    fmt: str,
) -> None:
    """List the guarded claims whose data a deletion would destroy.

    Those bound to a volume with persistentVolumeReclaimPolicy Delete (or Recycle) and with no
    ready VolumeSnapshot; claims on a Retain volume or with a ready snapshot are counted as
    safe. Exit 0 when the cluster was read, 2 when it could not be.
    """
    if not live:
        fail(
            "gate audit reads the cluster's claims, volumes and snapshots: give --live (with "
            "--kubeconfig/--kube-context to choose the cluster)"
        )
    from gate.app.policy import policy_at
    from gate.engine.audit import audit_claims
    from gate.kube.audit import AUDIT_HINT, read_audit
    from gate.kube.snapshot import ApiLister
    from gate.report.audit import audit_json, audit_text

    try:
        ns = _namespace(namespace, all_namespaces, kubeconfig, kube_context)
        policy = policy_at(".", None, config_path, say)
        with ApiLister.from_kubeconfig(
            kubeconfig, kube_context, policy.live_timeout_seconds, hint=AUDIT_HINT
        ) as lister:
            read = read_audit(lister, policy.live_page_size, ns)
    except GateError as exc:
        fail(str(exc))
    guarded = policy.is_guarded_kind("", "PersistentVolumeClaim")
    audit = audit_claims(read.claims, read.volumes, read.snapshots, ns, guarded)
    click.echo(audit_json(audit) if fmt == "json" else audit_text(audit))
    sys.exit(EXIT_READ)
