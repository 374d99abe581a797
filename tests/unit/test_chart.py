"""The Helm chart charts/prune-gate, rendered by the real (pinned) helm and read back as objects.

helm comes from `scripts/build-binaries path helm` (built when missing). Outside CI a helm that
cannot be had skips these tests; in CI (`CI=true`) it fails them.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from gate.model.stateful import CATALOGUE
from gate.model.webhooks import WEBHOOK_NAME
from gate.sources.policyfile import policy_from_dict, policy_from_text
from tests.ci import pinned_binary
from webhook.arm import ANNOTATION, unarmed, wanted_policy
from webhook.register import rules_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "prune-gate"
RELEASE = "pg"
NAMESPACE = "gatekeeping"
FULLNAME = "pg-prune-gate"
HOST = f"{FULLNAME}.{NAMESPACE}.svc"

Obj = dict[str, Any]

#: helm is built from its Go module (two tests here read only the chart's files).
pytestmark = pytest.mark.binaries


def helm() -> str:
    """Path of the pinned helm (tests.ci.pinned_binary)."""
    return pinned_binary("helm")


def run_helm(*args: str, values: Obj | None = None) -> subprocess.CompletedProcess[str]:
    """Run helm with `values` (JSON is YAML) on stdin as one more values file."""
    extra = ["--values", "-"] if values is not None else []
    return subprocess.run(
        [helm(), *args, *extra],
        input=json.dumps(values) if values is not None else None,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HELM_CACHE_HOME": "/nonexistent", "HELM_CONFIG_HOME": "/nonexistent"},
    )


@functools.cache
def _render(values_json: str, tests: bool = False) -> tuple[Obj, ...]:
    only = ["--show-only", "templates/tests/verify.yaml"] if tests else ["--skip-tests"]
    result = run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *only,
        values=json.loads(values_json),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def render(values: Obj | None = None) -> list[Obj]:
    """`helm template` of the chart with `values`: the objects an install makes, in helm's
    order (not `helm test`'s: render_tests). A deep copy: a caller that edits an object must not
    change what the next test renders."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True))))


def render_tests(values: Obj | None = None) -> list[Obj]:
    """The objects `helm test` makes (templates/tests)."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True), tests=True)))


def render_error(values: Obj) -> str:
    """`helm template` that must fail; its stderr."""
    result = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)
    assert result.returncode != 0, f"rendered although it should not: {result.stdout[:400]}"
    return result.stderr


def one(objs: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} objects of kind {kind} named {name}"
    return found[0]


def kinds(objs: Iterable[Obj]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objs)


def webhook_of(objs: Iterable[Obj]) -> Obj:
    config = one(objs, "ValidatingWebhookConfiguration")
    hooks = config["webhooks"]
    assert len(hooks) == 1
    hook: Obj = hooks[0]
    return hook


def container(objs: Iterable[Obj]) -> Obj:
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["webhook"]
    c: Obj = pod["containers"][0]
    return c


def pem(b64: str) -> bytes:
    return base64.b64decode(b64)


# --- lint -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"tls": {"mode": "certManager"}},
        {"tls": {"mode": "secret", "secret": {"name": "mine", "caBundle": "Zm9v"}}},
        {"serviceMonitor": {"enabled": True}, "networkPolicy": {"enabled": True}},
    ],
    ids=["defaults", "certManager", "secret", "optional-objects"],
)
def test_lint_strict(values: Obj) -> None:
    result = run_helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, values=values)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


# --- defaults -------------------------------------------------------------------------------


def test_defaults_render_the_expected_objects() -> None:
    assert kinds(render()) == [
        ("ClusterRole", FULLNAME),
        ("ClusterRole", f"{FULLNAME}-arm"),
        ("ClusterRole", f"{FULLNAME}-selfwatch"),
        ("ClusterRoleBinding", FULLNAME),
        ("ClusterRoleBinding", f"{FULLNAME}-arm"),
        ("ClusterRoleBinding", f"{FULLNAME}-selfwatch"),
        ("ConfigMap", FULLNAME),
        ("Deployment", FULLNAME),
        ("PodDisruptionBudget", FULLNAME),
        ("Secret", f"{FULLNAME}-tls"),
        ("Service", FULLNAME),
        ("ServiceAccount", FULLNAME),
        ("ValidatingWebhookConfiguration", FULLNAME),
    ]


def test_every_object_has_the_standard_labels_and_namespaced_ones_the_release_namespace() -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"}
    for obj in render({"liveReader": {"create": True}, "serviceMonitor": {"enabled": True}}):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "prune-gate", obj["kind"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.2.0"
        assert labels["helm.sh/chart"] == "prune-gate-0.2.0"
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


def test_webhook_asks_about_deletes_and_updates_of_the_default_guarded_kinds() -> None:
    hook = webhook_of(render())
    assert hook["name"] == WEBHOOK_NAME
    # Their status subresources too (UPDATE only): a /status write may change metadata.
    status = [r for r in hook["rules"] if all("/" in x for x in r["resources"])]
    assert {x for r in status for x in r["resources"]} >= {"namespaces/finalize"}
    assert {o for r in status for o in r["operations"]} == {"UPDATE"}
    main = [r for r in hook["rules"] if r not in status]
    assert all(rule["operations"] == ["CREATE", "DELETE", "UPDATE"] for rule in main)
    resources = {(g, r) for rule in main for g in rule["apiGroups"] for r in rule["resources"]}
    assert resources == {
        ("", "persistentvolumeclaims"),
        ("", "persistentvolumes"),
        # guarded in CI too: one default for both doors (gate/engine/policy.py)
        ("snapshot.storage.k8s.io", "volumesnapshots"),
        ("", "namespaces"),
        ("apps", "statefulsets"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        # The stateful custom kinds, by the catalogue's plurals: a CloudNativePG Cluster's prune
        # is refused like a claim's, and the rule is inert until the CRD is installed.
        *((k.group, k.plural) for k in CATALOGUE),
    }
    assert ("postgresql.cnpg.io", "clusters") in resources
    # The same rules `gate webhook serve --register` would register for the default policy.
    assert hook["rules"] == rules_for(policy_from_dict({}))
    assert hook["failurePolicy"] == "Ignore"  # disarmed: the webhook arms it (below)
    assert hook["timeoutSeconds"] == 5
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["clientConfig"]["service"] == {
        "name": FULLNAME,
        "namespace": NAMESPACE,
        "path": "/validate",
        "port": 443,
    }
    assert "url" not in hook["clientConfig"]


def test_namespace_selector_excludes_kube_system_and_the_release_namespace() -> None:
    hook = webhook_of(render({"webhook": {"excludedNamespaces": ["flux-system"]}}))
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["flux-system", NAMESPACE, "kube-system"],
            }
        ]
    }


@pytest.mark.parametrize(
    "guarded",
    [
        ["PersistentVolumeClaim"],
        ["PersistentVolumeClaim", "VolumeSnapshot.snapshot.storage.k8s.io", "StatefulSet.apps"],
        ["Namespace", "CustomResourceDefinition.apiextensions.k8s.io"],
    ],
)
def test_rules_follow_policy_webhook_guarded_kinds(guarded: list[str]) -> None:
    policy = {"webhook": {"guardedKinds": guarded}}
    hook = webhook_of(render({"policy": policy}))
    assert hook["rules"] == rules_for(policy_from_dict(policy))


def test_explicit_webhook_rules_win() -> None:
    values = {
        "policy": {"webhook": {"guardedKinds": ["PersistentVolumeClaim"]}},
        "webhook": {"rules": [{"apiGroups": [""], "resources": ["persistentvolumes"]}]},
    }
    hook = webhook_of(render(values))
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["CREATE", "DELETE", "UPDATE"],
            "resources": ["persistentvolumes"],
            "scope": "*",
        },
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["persistentvolumes/status"],
            "scope": "*",
        },
        {
            "apiGroups": ["apps"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["statefulsets"],
            "scope": "*",
        },
    ]


def test_failure_policy_timeout_and_object_selector_values() -> None:
    selector = {"matchLabels": {"prune-gate.io/guard": "true"}}
    hook = webhook_of(
        render(
            {
                "webhook": {
                    "failurePolicy": "Ignore",
                    "timeoutSeconds": 10,
                    "objectSelector": selector,
                    "name": "guard",
                }
            }
        )
    )
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 10)
    assert hook["objectSelector"] == selector
    assert one(render({"webhook": {"name": "guard"}}), "ValidatingWebhookConfiguration")


# --- arming: created disarmed, armed by the webhook once a pod is Ready (webhook/arm.py) -------

FENCE = {"policy": {"webhook": {"fence": {"namespace": "ci", "name": "fence"}}}}


@pytest.mark.parametrize("chosen", ["Fail", "Ignore"])
def test_every_entry_is_rendered_disarmed_and_the_chosen_policy_is_recorded(chosen: str) -> None:
    """No install can refuse a DELETE before a pod answers: every entry is Ignore, whatever the
    operator chose; the choice is the annotation the webhook arms it by."""
    config = one(
        render({**FENCE, "webhook": {"failurePolicy": chosen}}), "ValidatingWebhookConfiguration"
    )
    assert [(h["name"], h["failurePolicy"]) for h in config["webhooks"]] == [
        (WEBHOOK_NAME, "Ignore"),
        ("fence.prune-gate.io", "Ignore"),
    ]
    assert config["metadata"]["annotations"][ANNOTATION] == chosen
    assert wanted_policy(config) == chosen
    # What the webhook would patch: both entries to Fail when Fail was chosen, nothing otherwise.
    assert unarmed(config) == ([WEBHOOK_NAME, "fence.prune-gate.io"] if chosen == "Fail" else [])


def test_the_annotation_sits_beside_cert_managers_and_the_operators() -> None:
    values = {"tls": {"mode": "certManager"}, "webhook": {"annotations": {"team": "platform"}}}
    annotations = one(render(values), "ValidatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations == {
        ANNOTATION: "Fail",
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{FULLNAME}-serving",
        "team": "platform",
    }


def test_the_annotation_is_set_by_failure_policy_only() -> None:
    assert "failure-policy" in render_error({"webhook": {"annotations": {ANNOTATION: "Ignore"}}})


def test_the_arm_role_may_patch_exactly_its_own_configuration_and_nothing_more() -> None:
    objs = render({"webhook": {"name": "guard"}})
    role = one(objs, "ClusterRole", f"{FULLNAME}-arm")
    assert role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": ["guard"],
            "verbs": ["patch"],
        }
    ]
    binding = one(objs, "ClusterRoleBinding", f"{FULLNAME}-arm")
    assert binding["roleRef"]["name"] == f"{FULLNAME}-arm"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    # Over every role the chart makes: no other write on any webhook configuration.
    writes = [
        (rule.get("resourceNames"), verb)
        for obj in objs
        if obj["kind"] in ("ClusterRole", "Role")
        for rule in obj["rules"]
        if "admissionregistration.k8s.io" in rule["apiGroups"]
        for verb in rule["verbs"]
        if verb not in ("get", "list", "watch")
    ]
    assert writes == [(["guard"], "patch")]
    # The webhook watches the configuration it may arm.
    args = container(objs)["args"]
    assert "--watch-registration=guard" in args


@pytest.mark.parametrize(
    "values",
    [{"webhook": {"failurePolicy": "Ignore"}}, {"rbac": {"create": False}}],
    ids=["Ignore-chosen", "no-rbac"],
)
def test_no_arm_role_when_nothing_is_to_be_armed_or_no_rbac_is_made(values: Obj) -> None:
    assert not [o for o in render(values) if o["metadata"]["name"].endswith("-arm")]


LIVE_SERVICE = {"name": FULLNAME, "namespace": NAMESPACE, "path": "/validate", "port": 443}


@pytest.mark.parametrize(
    ("chosen", "live", "rendered"),
    [
        ("Fail", None, "Ignore"),  # install (and `helm template`): nothing to look up
        ("Fail", {"failurePolicy": "Ignore"}, "Ignore"),  # not armed yet
        ("Fail", {"failurePolicy": "Fail"}, "Fail"),  # armed: an upgrade keeps it so
        ("Ignore", {"failurePolicy": "Fail"}, "Ignore"),  # the operator chose Ignore
        # armed, but for another CA or service: the webhook arms it again once it verifies
        ("Fail", {"failurePolicy": "Fail", "caBundle": "b3RoZXI="}, "Ignore"),
        ("Fail", {"failurePolicy": "Fail", "service": {"name": "other"}}, "Ignore"),
        ("Fail", {"failurePolicy": "Fail", "service": {"port": 8443}}, "Ignore"),
    ],
)
def test_the_rendered_policy_keeps_an_armed_entry_armed_only(
    tmp_path: Path, chosen: str, live: Obj | None, rendered: str
) -> None:
    """The helper `webhook.yaml` gives the entry `lookup` found (upgrade); Helm's three-way merge
    would set a live Fail back to a rendered Ignore on every upgrade."""
    chart = tmp_path / "prune-gate"
    shutil.copytree(CHART, chart)
    entry: Obj | None = None
    if live is not None:
        service = {**LIVE_SERVICE, **live.get("service", {})}
        client = {"service": service, "caBundle": live.get("caBundle", "Q0E=")}
        entry = {"failurePolicy": live["failurePolicy"], "clientConfig": client}
    (chart / "templates" / "probe.yaml").write_text(
        '{{- $args := dict "chosen" .Values.webhook.failurePolicy "service" '
        f'"{FULLNAME}" "namespace" .Release.Namespace "port" .Values.service.port '
        '"caBundle" "Q0E=" }}\n'
        "kind: Probe\n"
        'policy: {{ include "prune-gate.renderedFailurePolicy" '
        '(merge (dict "live" (.Values.probeLive | fromJson)) $args) }}\n'
    )
    (chart / "values.schema.json").unlink()  # for the probe's own value
    result = run_helm(
        "template",
        RELEASE,
        str(chart),
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/probe.yaml",
        values={"webhook": {"failurePolicy": chosen}, "probeLive": json.dumps(entry or {})},
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["policy"] == rendered


# --- the Deployment ---------------------------------------------------------------------------


def test_deployment_runs_the_webhook_in_cluster() -> None:
    objs = render()
    deploy = one(objs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    c = container(objs)
    assert c["image"] == "ghcr.io/prune-gate/prune-gate:0.2.0"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert [*c["command"], *c["args"]] == [
        "gate",
        "webhook",
        "serve",
        "--cert-file=/tls/tls.crt",
        "--key-file=/tls/tls.key",
        "--listen=0.0.0.0:8443",
        "--config=/config/prune-gate.yaml",
        f"--namespace={NAMESPACE}",
        "--workers=2",
        f"--watch-registration={FULLNAME}",
        "--health-port=8081",
        "--max-connections=1024",
        "--handshake-timeout=5s",
        "--header-timeout=5s",
        "--idle-timeout=30s",
        "--queue-timeout=500ms",
        "--max-handshakes=256",
        "--http2",
        "--http2-max-streams=250",
        "--max-body-bytes=4194304",
        "--health-max-connections=32",
        "--health-header-timeout=3s",
        "--health-idle-timeout=10s",
        "--stuck-interval=5m",
        "--stuck-older-than=5m",
    ]
    assert not any("kubeconfig" in a for a in c["args"])
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert c["ports"] == [
        {"name": "https", "containerPort": 8443, "protocol": "TCP"},
        {"name": "health", "containerPort": 8081, "protocol": "TCP"},
    ]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert c[probe]["httpGet"] == {"path": path, "port": "health", "scheme": "HTTP"}
    assert c["resources"]["requests"] and c["resources"]["limits"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == FULLNAME
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/tls": "tls", "/config": "config", "/tmp": "tmp"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == f"{FULLNAME}-tls"
    assert volumes["config"]["configMap"]["name"] == FULLNAME
    # Pods select on the Service's selector and spread softly over nodes by default.
    service = one(objs, "Service")
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
        {"name": "metrics", "port": 8081, "targetPort": "health", "protocol": "TCP"},
    ]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deploy["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_image_tag_digest_and_scheduling_values() -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
        }
    ]
    objs = render(
        {
            "image": {"repository": "registry.example/pg", "tag": "1.2.3"},
            "podAntiAffinity": "hard",
            "topologySpreadConstraints": spread,
            "extraArgs": ["--max-body-bytes=1024"],
            "replicaCount": 3,
        }
    )
    c = container(objs)
    assert c["image"] == "registry.example/pg:1.2.3"
    assert c["args"][-1] == "--max-body-bytes=1024"
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    required = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0]["topologyKey"] == "kubernetes.io/hostname"
    (constraint,) = pod["topologySpreadConstraints"]
    assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
    digest = "sha256:" + "a" * 64
    assert (
        container(render({"image": {"digest": digest}}))["image"]
        == f"ghcr.io/prune-gate/prune-gate@{digest}"
    )
    assert (
        "affinity"
        not in one(render({"podAntiAffinity": "none"}), "Deployment")["spec"]["template"]["spec"]
    )


def test_pod_disruption_budget_only_with_more_than_one_replica() -> None:
    pdb = one(render(), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
    assert not [o for o in render({"replicaCount": 1}) if o["kind"] == "PodDisruptionBudget"]


# --- the policy ConfigMap ---------------------------------------------------------------------

POLICY: Obj = {
    "guardedKinds": ["PersistentVolumeClaim", "PersistentVolume"],
    "severity": {"SPECULATIVE_PRUNE": {"speculative": "defer"}, "ORPHANED_BY_KEEP": "warn"},
    "exemptions": [
        {
            "kind": "PersistentVolumeClaim",
            "namespace": "ci-*",
            "labels": {"tier": "scratch"},
            "reason": "CI scratch claims",
            "expires": "2027-06-30",
        }
    ],
    "webhook": {
        "deployers": ["system:serviceaccount:flux-system:kustomize-controller"],
        "breakGlassGroups": ["platform-oncall"],
        "fence": {"namespace": "prune-gate", "name": "speculation-fence"},
        "resync": "5m",
        "maxCacheAge": "15m",
    },
}


#: The chart's default `policy.webhook.deployers`: the identities KUBERNETES-FACTS.md names.
DEFAULT_DEPLOYERS = [
    "system:serviceaccount:flux-system:kustomize-controller",
    "system:serviceaccount:flux-system:helm-controller",
    "system:serviceaccount:argocd:argocd-application-controller",
]


def test_config_map_holds_the_policy_and_it_validates() -> None:
    data = one(render({"policy": POLICY}), "ConfigMap")["data"]
    assert list(data) == ["prune-gate.yaml"]
    # The file names its format first (gate config migrate's), and is otherwise the values'.
    assert data["prune-gate.yaml"].startswith("apiVersion: prune-gate.io/v1\n")
    assert yaml.safe_load(data["prune-gate.yaml"]) == {"apiVersion": "prune-gate.io/v1", **POLICY}
    policy = policy_from_text(data["prune-gate.yaml"], "prune-gate.yaml")
    assert policy.webhook.fence == ("prune-gate", "speculation-fence")
    assert policy.webhook.deployers == ("system:serviceaccount:flux-system:kustomize-controller",)
    # The default policy names Flux's and Argo CD's controllers as the deployers (issue 37).
    default = one(render(), "ConfigMap")["data"]["prune-gate.yaml"]
    expected = {"apiVersion": "prune-gate.io/v1", "webhook": {"deployers": DEFAULT_DEPLOYERS}}
    assert yaml.safe_load(default) == expected
    policy_from_dict(yaml.safe_load(default))


def checksum(values: Obj) -> str:
    annotations = one(render(values), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    value: str = annotations["checksum/config"]
    return value


def test_checksum_annotation_changes_with_the_policy_only() -> None:
    base = checksum({"policy": POLICY})
    assert len(base) == 64
    changed = {"policy": {**POLICY, "webhook": {**POLICY["webhook"], "resync": "10m"}}}
    assert checksum(changed) != base
    assert checksum({"policy": POLICY, "webhook": {"timeoutSeconds": 9}}) == base


# --- TLS ------------------------------------------------------------------------------------


def test_tls_helm_mode_ca_bundle_is_the_ca_that_signed_the_serving_certificate() -> None:
    objs = render()
    secret = one(objs, "Secret", f"{FULLNAME}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_bundle = webhook_of(objs)["clientConfig"]["caBundle"]
    assert ca_bundle == secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(pem(ca_bundle))
    cert = x509.load_pem_x509_certificate(pem(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)  # raises unless the CA's key signed it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = san.get_values_for_type(x509.DNSName)
    assert HOST in names
    assert f"{HOST}.cluster.local" in names
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    key = serialization.load_pem_private_key(pem(secret["data"]["tls.key"]), password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]
    validity = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert validity.days >= 3649


def test_tls_helm_mode_validity_days() -> None:
    secret = one(render({"tls": {"helm": {"validityDays": 30}}}), "Secret")
    cert = x509.load_pem_x509_certificate(pem(secret["data"]["tls.crt"]))
    assert 29 <= (cert.not_valid_after_utc - cert.not_valid_before_utc).days <= 30


def test_tls_cert_manager_mode_issues_the_certificate_and_injects_the_ca() -> None:
    objs = render({"tls": {"mode": "certManager"}})
    assert not [o for o in objs if o["kind"] == "Secret"]
    config = one(objs, "ValidatingWebhookConfiguration")
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    serving = one(objs, "Certificate", f"{FULLNAME}-serving")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{FULLNAME}-serving"
    )
    assert HOST in serving["spec"]["dnsNames"]
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls_volume["secret"]["secretName"] == serving["spec"]["secretName"]
    # Without an issuerRef the chart makes its own CA: self-signed Issuer -> CA -> CA Issuer.
    ca = one(objs, "Certificate", f"{FULLNAME}-ca")
    assert ca["spec"]["isCA"] is True
    assert ca["spec"]["issuerRef"]["name"] == f"{FULLNAME}-selfsigned"
    assert one(objs, "Issuer", f"{FULLNAME}-selfsigned")["spec"] == {"selfSigned": {}}
    ca_issuer = one(objs, "Issuer", f"{FULLNAME}-ca")
    assert ca_issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    assert serving["spec"]["issuerRef"]["name"] == f"{FULLNAME}-ca"


def test_tls_cert_manager_mode_with_an_existing_issuer() -> None:
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    objs = render({"tls": {"mode": "certManager", "certManager": {"issuerRef": issuer}}})
    assert [o["kind"] for o in objs if o["apiVersion"].startswith("cert-manager.io")] == [
        "Certificate"
    ]
    assert one(objs, "Certificate")["spec"]["issuerRef"] == issuer


def test_tls_secret_mode_uses_the_given_secret_and_ca_bundle() -> None:
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...").decode()
    objs = render(
        {"tls": {"mode": "secret", "secret": {"name": "webhook-tls", "caBundle": bundle}}}
    )
    assert not [o for o in objs if o["kind"] in ("Secret", "Certificate", "Issuer")]
    assert webhook_of(objs)["clientConfig"]["caBundle"] == bundle
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "tls")["secret"] == {
        "secretName": "webhook-tls"
    }


def test_tls_secret_mode_requires_its_name_and_ca_bundle() -> None:
    err = render_error({"tls": {"mode": "secret", "secret": {"name": "webhook-tls"}}})
    assert "caBundle" in err


# --- RBAC -----------------------------------------------------------------------------------


def grants(role: Obj) -> set[tuple[str, str, str]]:
    """(group, resource, verb) triples of a ClusterRole."""
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_cluster_role_reads_what_the_cache_watches_and_writes_only_events() -> None:
    objs = render()
    role = one(objs, "ClusterRole", FULLNAME)
    have = grants(role)
    watched = [
        ("", "pods"),
        ("", "persistentvolumeclaims"),
        ("", "persistentvolumes"),
        ("", "namespaces"),
        ("apps", "statefulsets"),
        ("apps", "deployments"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("snapshot.storage.k8s.io", "volumesnapshots"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("coordination.k8s.io", "leases"),
    ]
    for group, resource in watched:
        for verb in ("get", "list", "watch"):
            assert (group, resource, verb) in have, (group, resource, verb)
    # The stateful custom kinds: watched (a rule kind, part of readiness) once their CRD exists.
    for k in CATALOGUE:
        assert {(k.group, k.plural, "list"), (k.group, k.plural, "watch")} <= have, k.name
    for group in ("", "events.k8s.io"):
        assert {(group, "events", "create"), (group, "events", "patch")} <= have
    # Least privilege: no wildcard anywhere, nothing of Secrets (attack 12).
    assert not any("*" in (g, r, v) for g, r, v in have), sorted(have)
    assert not any(r == "secrets" for _g, r, _v in have)
    writes = {(g, r, v) for g, r, v in have if v not in ("get", "list", "watch")}
    assert {r for _g, r, _v in writes} == {"events"}
    binding = one(objs, "ClusterRoleBinding", FULLNAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": FULLNAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"liveReader": {"create": True}},
        {"rbac": {"countedResources": [{"apiGroups": ["a.io", "b.io"], "resources": ["x"]}]}},
    ],
    ids=["defaults", "live-reader", "counted"],
)
def test_no_rendered_rule_reads_secrets_or_uses_a_wildcard(values: Obj) -> None:
    roles = [o for o in render(values) if o["kind"] in ("ClusterRole", "Role")]
    assert roles
    for role in roles:
        for g, r, v in grants(role):
            assert "*" not in (g, r, v), (role["metadata"]["name"], g, r, v)
            assert r != "secrets", (role["metadata"]["name"], g, r, v)


def test_custom_resource_access_can_be_narrowed_and_rbac_left_out() -> None:
    narrowed = [{"apiGroups": ["example.com"], "resources": ["widgets", "gadgets"]}]
    role = one(render({"rbac": {"countedResources": narrowed}}), "ClusterRole", FULLNAME)
    have = grants(role)
    assert not any(g == "*" or r == "*" for g, r, _v in have)
    assert ("example.com", "gadgets", "watch") in have
    objs = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "x"}})
    assert not [
        o for o in objs if o["kind"].startswith("ClusterRole") or o["kind"] == "ServiceAccount"
    ]
    assert one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "x"


def test_live_reader_role_is_optional_and_read_only() -> None:
    assert not [o for o in render() if o["metadata"]["name"].endswith("-live-reader")]
    subjects = [{"kind": "Group", "name": "ci", "apiGroup": "rbac.authorization.k8s.io"}]
    objs = render({"liveReader": {"create": True, "subjects": subjects}})
    role = one(objs, "ClusterRole", f"{FULLNAME}-live-reader")
    have = grants(role)
    assert {v for _g, _r, v in have} == {"get", "list"}
    listed = {(g, r) for g, r, v in have if v == "list"}
    assert listed == {
        ("", "pods"),
        ("", "persistentvolumeclaims"),
        ("", "persistentvolumes"),
        ("", "namespaces"),
        ("apps", "statefulsets"),
        ("apps", "deployments"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("snapshot.storage.k8s.io", "volumesnapshots"),
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("argoproj.io", "applications"),
    }
    binding = one(objs, "ClusterRoleBinding", f"{FULLNAME}-live-reader")
    assert binding["subjects"] == subjects
    assert binding["roleRef"]["name"] == f"{FULLNAME}-live-reader"
    # Without subjects there is only the role, to bind by hand.
    alone = render({"liveReader": {"create": True}})
    assert not [
        o for o in alone if o["kind"] == "ClusterRoleBinding" and "live" in o["metadata"]["name"]
    ]


# --- the API server's client certificate (attack 8 of issue 8) --------------------------------


@pytest.mark.parametrize(
    ("source", "volume"),
    [
        ({"configMap": "apiserver-webhook-ca"}, {"configMap": {"name": "apiserver-webhook-ca"}}),
        ({"secret": "apiserver-webhook-ca"}, {"secret": {"secretName": "apiserver-webhook-ca"}}),
    ],
    ids=["configMap", "secret"],
)
def test_client_ca_mounts_the_ca_and_requires_it(source: Obj, volume: Obj) -> None:
    objs = render({"webhook": {"clientCA": {"enabled": True, **source, "key": "tls-ca.pem"}}})
    c = container(objs)
    assert "--client-ca=/client-ca/tls-ca.pem" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["client-ca"] == {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True}
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (found,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    ((kind, spec),) = ((k, v) for k, v in found.items() if k != "name")
    assert spec == {**volume[kind], "items": [{"key": "tls-ca.pem", "path": "tls-ca.pem"}]}
    # probes stay reachable without a client certificate
    assert c["readinessProbe"]["httpGet"]["port"] == "health"


def test_client_ca_is_off_by_default() -> None:
    c = container(render())
    assert not any(a.startswith("--client-ca") for a in c["args"])
    assert "client-ca" not in {m["name"] for m in c["volumeMounts"]}


@pytest.mark.parametrize(
    ("client_ca", "needle"),
    [
        ({"enabled": True}, "webhook.clientCA.enabled needs webhook.clientCA.configMap or"),
        ({"enabled": True, "configMap": "a", "secret": "b"}, "give configMap or secret, not both"),
    ],
    ids=["no-source", "both"],
)
def test_client_ca_needs_exactly_one_source(client_ca: Obj, needle: str) -> None:
    assert needle in render_error({"webhook": {"clientCA": client_ca}})


# --- optional objects -----------------------------------------------------------------------


def test_service_monitor_scrapes_metrics_on_the_health_port() -> None:
    objs = render({"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}})
    monitor = one(objs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    (endpoint,) = monitor["spec"]["endpoints"]
    # plain HTTP: Prometheus has no client certificate for webhook.clientCA
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == (
        "metrics",
        "http",
        "/metrics",
    )
    assert "tlsConfig" not in endpoint
    ports = {p["name"]: p for p in one(objs, "Service")["spec"]["ports"]}
    assert ports["metrics"]["targetPort"] == "health"
    assert monitor["spec"]["selector"]["matchLabels"] == one(objs, "Service")["spec"]["selector"]
    assert not [o for o in render() if o["kind"] == "ServiceMonitor"]


def test_network_policy_admits_the_webhook_port_and_the_health_port() -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.0/8"}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    values = {"networkPolicy": {"enabled": True, "ingressFrom": peers, "healthFrom": prometheus}}
    policy = one(render(values), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": "https", "protocol": "TCP"}], "from": peers},
        {"ports": [{"port": "health", "protocol": "TCP"}], "from": prometheus},
    ]
    assert not [o for o in render() if o["kind"] == "NetworkPolicy"]


def test_the_health_port_admits_only_the_metrics_scraper_by_default() -> None:
    """The health port needs no client certificate: by default only the namespace `monitoring`
    (a Prometheus) may reach it, besides the pod's node (kubelet's probes), which a
    NetworkPolicy always admits and so needs, and has, no rule. The webhook port stays open to
    any source (the API server's address is not selectable)."""
    policy = one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": "https", "protocol": "TCP"}]},
        {"ports": [{"port": "health", "protocol": "TCP"}], "from": [monitoring]},
    ]
    # `[]` is the node only: no rule, since a rule without `from` admits every source.
    node_only = one(render({"networkPolicy": {"enabled": True, "healthFrom": []}}), "NetworkPolicy")
    assert node_only["spec"]["ingress"] == [{"ports": [{"port": "https", "protocol": "TCP"}]}]
    # Widened, as values.yaml says: the scraper's pods, and a host-network scraper's node.
    wider = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        },
        {"ipBlock": {"cidr": "192.168.10.0/24"}},
    ]
    widened = one(
        render({"networkPolicy": {"enabled": True, "healthFrom": wider}}), "NetworkPolicy"
    )
    assert widened["spec"]["ingress"][1] == {
        "ports": [{"port": "health", "protocol": "TCP"}],
        "from": wider,
    }


def test_the_listeners_budgets_and_deadlines_are_values() -> None:
    values = {
        "server": {
            "tls": {
                "maxConnections": 4096,
                "headerTimeout": "2s",
                "queueTimeout": "0s",
                "maxHandshakes": 0,
                "http2": False,
                "http2MaxStreams": 128,
            },
            "health": {"maxConnections": 8, "idleTimeout": "1s"},
        }
    }
    args = container(render(values))["args"]
    assert "--max-connections=4096" in args
    assert "--header-timeout=2s" in args
    assert "--handshake-timeout=5s" in args  # the default of what was not given
    assert "--queue-timeout=0s" in args
    assert "--max-handshakes=0" in args
    assert "--no-http2" in args and "--http2" not in args
    assert "--http2-max-streams=128" in args
    assert "--http2" in container(render({}))["args"]
    assert "--health-max-connections=8" in args
    assert "--health-idle-timeout=1s" in args


# --- values.schema.json -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"replicaCont": 3}, "replicaCont"),
        ({"tls": {"mode": "helm", "helmm": {}}}, "helmm"),
        ({"tls": {"mode": "vault"}}, "mode"),
        ({"webhook": {"failurePolicy": "Maybe"}}, "failurePolicy"),
        ({"webhook": {"timeoutSeconds": 60}}, "timeoutSeconds"),
        ({"policy": {"webhook": {"guardedKind": ["PersistentVolumeClaim"]}}}, "guardedKind"),
        ({"policy": {"webhook": {"resync": "5"}}}, "resync"),
        ({"rbac": {"countedResources": [{"apiGroups": ["x"]}]}}, "resources"),
        ({"rbac": {"countedResources": [{"apiGroups": ["*"], "resources": ["x"]}]}}, "apiGroups"),
        (
            {"rbac": {"countedResources": [{"apiGroups": ["x.io"], "resources": ["*"]}]}},
            "resources",
        ),
        (
            {"rbac": {"countedResources": [{"apiGroups": [""], "resources": ["secrets"]}]}},
            "apiGroups",
        ),
        (
            {"rbac": {"countedResources": [{"apiGroups": ["x.io"], "resources": ["secrets"]}]}},
            "resources",
        ),
        ({"rbac": {"customResources": []}}, "customResources"),
        ({"serviceMonitor": {"tlsConfig": {}}}, "tlsConfig"),
        ({"healthPort": 8443}, "healthPort"),
        ({"webhook": {"clientCA": {"enable": True}}}, "enable"),
        ({"server": {"health": {"maxConnections": 0}}}, "maxConnections"),
        ({"server": {"tls": {"headerTimeout": "0s"}}}, "headerTimeout"),
        ({"server": {"tls": {"headerTimeout": "5"}}}, "headerTimeout"),
        ({"server": {"health": {"handshakeTimeout": "5s"}}}, "handshakeTimeout"),
        ({"server": {"tls": {"queueTimeout": "1"}}}, "queueTimeout"),
        ({"server": {"tls": {"maxHandshakes": -1}}}, "maxHandshakes"),
        ({"networkPolicy": {"enabled": True, "healthFrom": [{}]}}, "healthFrom"),
        (
            {"networkPolicy": {"healthFrom": [{"namespaceSelecter": {}}]}},
            "namespaceSelecter",
        ),
    ],
    ids=[
        "top",
        "nested",
        "mode",
        "failure-policy",
        "timeout",
        "policy-key",
        "duration",
        "rule",
        "wildcard-group",
        "wildcard-resource",
        "core-secrets",
        "secrets",
        "renamed-key",
        "tls-config-gone",
        "health-port-is-the-tls-port",
        "client-ca-typo",
        "no-connections",
        "zero-deadline",
        "deadline-without-unit",
        "no-handshake-on-plain-http",
        "queue-timeout-without-unit",
        "negative-max-handshakes",
        "empty-peer",
        "peer-typo",
    ],
)
def test_values_schema_rejects_typos_and_bad_values(values: Obj, needle: str) -> None:
    err = render_error(values)
    assert "schema" in err
    assert needle in err


def test_values_schema_embeds_the_policy_schema() -> None:
    chart_schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    policy_schema = json.loads(
        (REPO / "gate" / "schemas" / "policy.schema.json").read_text(encoding="utf-8")
    )
    embedded = chart_schema["properties"]["policy"]
    # The chart writes the file's apiVersion itself (its ConfigMap): values may not set it.
    policy_schema["properties"].pop("apiVersion")
    for key in ("type", "additionalProperties", "properties"):
        assert embedded[key] == policy_schema[key], key
    for name, definition in policy_schema["$defs"].items():
        assert chart_schema["$defs"][name] == definition, name


def test_values_yaml_documents_every_key_of_the_schema() -> None:
    chart_schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert set(values) == set(chart_schema["properties"]) - {"global"}


def test_notes_name_the_webhook_its_service_and_the_live_reader(tmp_path: Path) -> None:
    # `helm template` leaves NOTES.txt out: render a copy in which it is an ordinary template.
    chart = tmp_path / "prune-gate"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "templates" / "notes.txt")
    result = run_helm(
        "template",
        RELEASE,
        str(chart),
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/notes.txt",
        "--debug",  # print the text although it is not YAML
        values={"liveReader": {"create": True}},
    )
    notes = result.stdout
    assert "Now: not armed yet (the configuration is being created" in notes  # no cluster: lookup
    assert f"helm test {RELEASE} -n {NAMESPACE}   # passes once armed and refusing" in notes
    assert f"https://{HOST}:443/validate" in notes
    assert "namespaces, persistentvolumeclaims, persistentvolumes (core)" in notes
    assert "failurePolicy is Fail" in notes
    assert f"ClusterRole {FULLNAME}-live-reader" in notes
    assert "webhook.clientCA is off: anyone who reaches port 8443 can post a review" in notes
    assert 'plain HTTP on port 8081 (Service port "metrics")' in notes


# --- helm test ------------------------------------------------------------------------------


def test_helm_test_runs_webhook_verify_with_an_identity_of_its_own_that_lasts_only_the_test() -> (
    None
):
    objs = render_tests({"webhook": {"failurePolicy": "Ignore"}, "test": {"timeout": "90s"}})
    name = f"{FULLNAME}-verify"
    assert kinds(objs) == [
        ("ClusterRole", name), ("ClusterRoleBinding", name), ("Pod", name),
        ("ServiceAccount", name),
    ]  # fmt: skip
    for obj in objs:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "test"
        policy = set(annotations["helm.sh/hook-delete-policy"].split(","))
        # The identity goes pass or fail; the pod stays after a failure, for its log.
        expected = {"before-hook-creation", "hook-succeeded"}
        assert policy == (expected if obj["kind"] == "Pod" else expected | {"hook-failed"})
    pod = one(objs, "Pod", name)
    assert pod["spec"]["serviceAccountName"] == name
    assert pod["spec"]["restartPolicy"] == "Never"
    [c] = pod["spec"]["containers"]
    assert c["image"] == one(render(), "Deployment", FULLNAME)["spec"]["template"]["spec"][
        "containers"][0]["image"]  # fmt: skip
    assert [c["command"], c["args"]] == [["gate"], [
        "webhook", "verify", f"--configuration={FULLNAME}", "--failure-policy=Ignore",
        "--timeout=90s",
    ]]  # fmt: skip
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    rules = one(objs, "ClusterRole", name)["rules"]
    assert rules[0]["resourceNames"] == [FULLNAME]  # its own configuration, and only get
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        ("validatingwebhookconfigurations", "get"),
        *((r, v) for r in ("namespaces", "persistentvolumeclaims", "pods")
          for v in ("create", "delete")),
    }  # fmt: skip


def test_helm_test_can_be_turned_off() -> None:
    result = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                      "--show-only", "templates/tests/verify.yaml",
                      values={"test": {"enabled": False}})  # fmt: skip
    assert result.returncode != 0
    assert "could not find template" in result.stderr


# --- the healer -----------------------------------------------------------------------------


def test_the_healer_is_off_by_default_and_runs_heal_watch_with_its_own_identity_when_on() -> None:
    assert not [o for o in render() if "healer" in o["metadata"]["name"]]
    objs = render({"healer": {"enabled": True, "interval": "30s", "nodeDeadAfter": "10m"}})
    healer = f"{FULLNAME}-healer"
    deploy = one(objs, "Deployment", healer)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == healer
    [c] = pod["containers"]
    assert c["command"] == ["gate"]
    assert c["args"][:4] == ["heal", "--watch", "--apply", "--all-namespaces"]
    assert "--interval=30s" in c["args"] and "--node-dead-after=10m" in c["args"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # The webhook's Service and PodDisruptionBudget must not select the healer's pod.
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        obj = one(objs, kind, FULLNAME)
        selector = obj["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert not all(labels.get(k) == v for k, v in selector.items()), kind
    rules = one(objs, "ClusterRole", healer)["rules"]
    writes = {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
        if v != "list"
    }
    assert writes == {
        ("", "pods", "delete"),
        ("", "persistentvolumes", "patch"),
        ("", "events", "create"),
    }
    binding = one(objs, "ClusterRoleBinding", healer)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": healer, "namespace": NAMESPACE}
    ]


def test_healer_durations_are_checked_by_the_schema() -> None:
    assert "interval" in render_error({"healer": {"enabled": True, "interval": "5"}})
