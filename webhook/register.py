"""Register the webhook with the API server (a ValidatingWebhookConfiguration), and remove it.

For trying prune-gate against a cluster without a chart: the configuration points at the server by
URL with the self-signed CA as its caBundle, asks about DELETEs of the guarded kinds, the
UPDATEs that could make a controller delete them and the CREATEs that carry what those UPDATEs
may not add (narrowed by CEL `matchConditions`), and
leaves kube-system and the webhook's own namespace alone, so a broken webhook cannot lock the
control plane or itself out. `build_configuration` is pure; the two calls around it are not.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gate.engine.ledger import DATA_ANNOTATION
from gate.engine.policy import Policy
from gate.kube.client import ApiStatusError, request_json
from gate.kube.resources import RESOURCES
from gate.model.errors import ConfigError
from gate.model.stateful import CATALOGUE
from gate.model.webhooks import FENCE_WEBHOOK_NAME, WEBHOOK_NAME

PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"

#: Resource names of the kinds the webhook can guard without asking the API server: the table
#: `gate check --live` lists, and the catalogue of stateful custom kinds (guarded by default,
#: their CRDs often not installed yet: a rule may name a resource nothing serves, and matches it
#: once its CRD is). The chart's `$known` table is this one (tests/unit/test_register_updates.py).
PLURALS: dict[tuple[str, str], str] = {
    **{(k.group, k.kind): k.plural for k in CATALOGUE},
    **{(r.group, r.kind): r.plural for r in RESOURCES},
}


def discover_plurals(api: Any, kinds: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The resource names of guarded kinds outside the table, from the API server's discovery:
    what `--register` can ask and the chart cannot. A kind the server does not serve is left out
    (`rules_for` then says so): registering a guess would match nothing."""
    found: dict[tuple[str, str], str] = {}
    for group, kind in sorted(kinds):
        if (group, kind) in PLURALS or not group:
            continue
        try:
            versions = request_json(api, "GET", f"/apis/{group}", timeout=10).get("versions")
        except ApiStatusError as exc:
            if exc.status == 404:
                continue
            raise
        for version in versions or []:
            listing = request_json(api, "GET", f"/apis/{version['groupVersion']}", timeout=10)
            names = [
                str(r["name"])
                for r in listing.get("resources") or []
                if r.get("kind") == kind and "/" not in str(r.get("name", ""))
            ]
            if names:
                found[(group, kind)] = names[0]
                break
    return found


def metadata_subresources(resource: str) -> list[str]:
    """The subresources of `resource` whose UPDATEs keep metadata changes (labels, annotations,
    ownerReferences): every kind's `status`, and a Namespace's `finalize` too (both verified on a
    v1.34 API server: an ownerReference added through /finalize had the garbage collector delete
    the namespace, and with it everything it held)."""
    return [f"{resource}/status"] + (["namespaces/finalize"] if resource == "namespaces" else [])


def rules_for(
    policy: Policy, discovered: Mapping[tuple[str, str], str] | None = None
) -> list[dict[str, Any]]:
    """One CREATE, DELETE and UPDATE rule per API group, naming the guarded kinds' resources,
    then one UPDATE rule naming their status subresources and a Namespace's finalize
    (`metadata_subresources`: those writes change metadata too), and an UPDATE rule for
    StatefulSets when they are not guarded (their claim retention still is, and a /status write
    cannot change it).

    CREATEs and UPDATEs reach the webhook only when `update_match_expression` says they carry or
    touch what it judges. A kind outside the table needs its name in `discovered`.
    """
    by_group: dict[str, list[str]] = {}
    for group, kind in sorted(policy.webhook.guarded_kinds):
        resource = PLURALS.get((group, kind)) or (discovered or {}).get((group, kind))
        if resource is None:  # a guessed plural (`ingresss`) would match nothing: no guard at all
            name = f"{kind}.{group}" if group else kind
            known = ", ".join(sorted(f"{k}.{g}" if g else k for g, k in PLURALS))
            raise ConfigError(
                f"webhook.guardedKinds: {name} has no known resource name, so no webhook rule "
                f"can name it (known: {known}; `--register` also asks the API server, which "
                "does not serve it: install its CRD first); with the chart, list it in "
                "webhook.rules ({apiGroups, resources})"
            )
        by_group.setdefault(group, []).append(resource)
    rules: list[dict[str, Any]] = []
    for group, resources in sorted(by_group.items()):
        rules.append(
            {
                "apiGroups": [group],
                "apiVersions": ["*"],
                "operations": ["CREATE", "DELETE", "UPDATE"],
                "resources": sorted(resources),
                "scope": "*",
            }
        )
        # A /status write (and a Namespace's /finalize) may change labels and annotations too
        # (the API server keeps only the spec): a deployer could put the allow-delete override,
        # an ownerReference or a claim's disposable mark there unseen. matchConditions keep the
        # controllers' ordinary status writes off the webhook.
        rules.append(
            {
                "apiGroups": [group],
                "apiVersions": ["*"],
                "operations": ["UPDATE"],
                "resources": [s for r in sorted(resources) for s in metadata_subresources(r)],
                "scope": "*",
            }
        )
    if "statefulsets" not in by_group.get("apps", []):
        rules.append(
            {
                "apiGroups": ["apps"],
                "apiVersions": ["*"],
                "operations": ["UPDATE"],
                "resources": ["statefulsets"],
                "scope": "*",
            }
        )
    return rules


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def update_match_expression(policy: Policy) -> str:
    """CEL for `matchConditions`: every DELETE, only the UPDATEs that change an object's
    ownerReferences, the retire or allow-delete annotation, a StatefulSet's claim retention, a
    volume's reclaim policy or a protected
    label (`gate.engine.updates.protected_label_changes`), or a claim's disposable marks (the
    `prune-gate.io/data` annotation, a label `heal.disposableClaims` reads, or who managedFields
    say wrote one: `gate.engine.updates.disposable_marks_added`), and only the
    CREATEs that carry an ownerReference or either annotation, or a claim that carries a mark.
    Each `has` guards the next step, so the expression never errors (an error would apply
    failurePolicy)."""

    def owners(obj: str) -> str:
        return f"(has({obj}.metadata.ownerReferences) ? {obj}.metadata.ownerReferences : [])"

    def spec_field(name: str, absent: str) -> Callable[[str], str]:
        def read(obj: str) -> str:
            field = f"{obj}.spec.{name}"
            return f"(has({obj}.spec) && has({field}) ? {field} : {absent})"

        return read

    def entry(field: str, key: str, absent: str) -> Callable[[str], str]:
        """One key of metadata.annotations or .labels, `absent` when it is not there."""
        k = _cel_string(key)

        def read(obj: str) -> str:
            m = f"{obj}.metadata.{field}"
            return f"(has({m}) && {k} in {m} ? {m}[{k}] : {absent})"

        return read

    def writers(field: str, key: str) -> Callable[[str], str]:
        """`[manager, operation, subresource]` of each managedFields entry that owns one key of
        metadata.annotations or .labels: every field `gate.engine.marks.is_hand` reads, so an
        UPDATE that rewrites any of them (drops `subresource: status` from an entry a /status
        write made) reaches the webhook. A list, not a joined string: no separator a manager
        name could carry makes two entries look alike. (`time` is left out: every write of
        the manager changes it; `apiVersion` and `fieldsType` say nothing of who wrote it.)"""
        part, k = _cel_string(f"f:{field}"), _cel_string(f"f:{key}")

        def read(obj: str) -> str:
            mf = f"{obj}.metadata.managedFields"
            m = "e.fieldsV1['f:metadata']"
            return (
                f"(has({mf}) ? {mf}.filter(e, has(e.fieldsV1) && 'f:metadata' in e.fieldsV1 && "
                f"{part} in {m} && {k} in {m}[{part}]).map(e, ["
                "has(e.manager) ? e.manager : '', "
                "has(e.operation) ? e.operation : '', "
                "has(e.subresource) ? e.subresource : '']) : [])"
            )

        return read

    fields = (
        owners,
        entry("annotations", policy.retire_annotation, "''"),
        entry("annotations", policy.allow_delete_annotation, "''"),
        spec_field("persistentVolumeClaimRetentionPolicy", "{}"),
        spec_field("persistentVolumeReclaimPolicy", "''"),
        # `<none>` is no label value (they are [A-Za-z0-9_.-]): absent differs from "".
        *(entry("labels", key, "'<none>'") for key in policy.webhook.protected_labels),
    )
    changed = " || ".join(f"{f('object')} != {f('oldObject')}" for f in fields)
    # A CREATE carrying an owner or either annotation; `oldObject` is null then, and the
    # `operation ==` tests keep each branch from reading what its operation lacks.
    carries = f"{owners('object')} != [] || " + " || ".join(
        f"{f('object')} != ''" for f in fields[1:3]
    )
    # A claim's disposable marks: their values, and who managedFields say wrote them.
    marks = [
        ("annotations", DATA_ANNOTATION, "''"),
        *(("labels", key, "'<none>'") for key in policy.disposable_label_keys()),
    ]
    claim = "request.resource.group == '' && request.resource.resource == 'persistentvolumeclaims'"
    marks_changed = " || ".join(
        f"{f('object')} != {f('oldObject')}"
        for field, key, absent in marks
        for f in (entry(field, key, absent), writers(field, key))
    )
    marks_carried = " || ".join(
        f"{entry(field, key, absent)('object')} != {absent}" for field, key, absent in marks
    )
    return (
        f"request.operation == 'DELETE' || (request.operation == 'UPDATE' && ({changed} || "
        f"({claim} && ({marks_changed})))) || "
        f"(request.operation == 'CREATE' && ({carries} || ({claim} && ({marks_carried}))))"
    )


def match_conditions(policy: Policy) -> list[dict[str, str]]:
    """The webhook's matchConditions: keep UPDATEs that cannot matter off the webhook."""
    return [{"name": "update-touches-guards", "expression": update_match_expression(policy)}]


def build_configuration(
    name: str,
    url: str,
    ca_pem: bytes,
    policy: Policy,
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
    own_namespace: str = "prune-gate",
    discovered: Mapping[tuple[str, str], str] | None = None,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration for a webhook served at `url`."""
    excluded = sorted({"kube-system", own_namespace})
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "prune-gate"}},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": rules_for(policy, discovered),
                "matchConditions": match_conditions(policy),
                **_how_called(failure_policy, timeout_seconds),
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": excluded,
                        }
                    ]
                },
            }
        ],
    }


def _how_called(failure_policy: str, timeout_seconds: int) -> dict[str, Any]:
    """The fields every entry shares: how the API server calls it and what a failure does."""
    return {
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": timeout_seconds,
        "admissionReviewVersions": ["v1"],
    }


def fence_webhook(
    policy: Policy,
    client_config: dict[str, Any],
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
) -> dict[str, Any] | None:
    """The webhook entry for CREATEs, UPDATEs and DELETEs of the fence Lease; None without a
    fence. CREATE too: a deployer that created the Lease held (for a year, in its own name) would
    wedge every deployer prune and CI's `gate fence hold` (`webhook.guards`).

    Separate from the guarded kinds' entry because that one leaves the webhook's own namespace
    alone, and the fence lives there by default. A matchCondition on the name keeps every other
    Lease (leader election renews them every few seconds) off the webhook.
    """
    if policy.webhook.fence is None:
        return None
    namespace, name = policy.webhook.fence
    lit = _cel_string(name)
    return {
        "name": FENCE_WEBHOOK_NAME,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": ["leases"],
                "scope": "Namespaced",
            }
        ],
        **_how_called(failure_policy, timeout_seconds),
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": namespace},
        },
        "matchConditions": [
            {
                # A collection DELETE reaches the webhook with request.name empty: read oldObject;
                # a CREATE from generateName has its name only in the object.
                "name": "fence-lease",
                "expression": f"request.name == {lit} || "
                f"(object != null && object.metadata.name == {lit}) || "
                f"(oldObject != null && oldObject.metadata.name == {lit})",
            }
        ],
    }


def with_fence(
    config: dict[str, Any], policy: Policy, failure_policy: str = "Fail", timeout_seconds: int = 5
) -> dict[str, Any]:
    """`config` with the fence entry added (same server and CA as its first entry)."""
    first = config["webhooks"][0]
    entry = fence_webhook(policy, first["clientConfig"], failure_policy, timeout_seconds)
    if entry is None:
        return config
    return {**config, "webhooks": [*config["webhooks"], entry]}


def register(api: Any, config: dict[str, Any]) -> None:
    """Create the configuration, replacing one of the same name."""
    name = config["metadata"]["name"]
    try:
        current = request_json(api, "GET", f"{PATH}/{name}")
    except ApiStatusError as exc:
        if exc.status != 404:
            raise
        request_json(api, "POST", PATH, body=config)
        return
    body = {**config, "metadata": {**config["metadata"], **_version(current)}}
    request_json(api, "PUT", f"{PATH}/{name}", body=body)


def unregister(api: Any, name: str) -> bool:
    """Delete the configuration; False when it was already gone."""
    try:
        request_json(api, "DELETE", f"{PATH}/{name}")
    except ApiStatusError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _version(current: dict[str, Any]) -> dict[str, Any]:
    rv = (current.get("metadata") or {}).get("resourceVersion")
    return {"resourceVersion": rv} if rv else {}
