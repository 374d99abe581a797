"""The example on each code's page: what the real rule prints on a tiny fixture.

Generated from the scenarios of tests/unit/code_examples.py by
`UPDATE_GOLDEN=1 pytest tests/unit/test_codes_pages.py`; do not edit: that test fails
when a rule's output drifts from its page.
"""

from __future__ import annotations

from gate.model.findings import Code

#: code -> (door, example): `check` is a finding as `gate check` prints it, `webhook`
#: the message the webhook refuses a request with (kubectl prints it after
#: `denied the request:`).
EXAMPLES: dict[Code, tuple[str, str]] = {
    Code.NOT_RETIRED: (
        "check",
        (
            "block NOT_RETIRED PersistentVolumeClaim app/data (base/manifests.yaml:1)\n"
            "  PersistentVolumeClaim app/data would be deleted but was never retired\n"
            "  - cause: removed from the manifests\n"
            "  - no `prune-gate.io/retire` annotation on the base revision\n"
            "  - data: not known (no bound volume seen, no PersistentVolume or StorageClass "
            "declared for it); a dynamically provisioned volume takes its StorageClass's "
            "reclaimPolicy, Delete by default: deleted with the claim; --live reads the bound "
            "volume's\n"
            "  fix: keep it in the candidate (base declares it at base/manifests.yaml:1) and "
            "retire PersistentVolumeClaim app/data in two stages: 1) merge a change that annotates "
            'it `prune-gate.io/retire: "<reason>"` and removes its consumers, and let it deploy; '
            "2) then remove the manifest"
        ),
    ),
    Code.SPECULATIVE_PRUNE: (
        "check",
        (
            "defer SPECULATIVE_PRUNE PersistentVolumeClaim app/data (base/manifests.yaml:1)\n"
            "  this merge-queue candidate would delete PersistentVolumeClaim app/data; a deletion "
            "cannot be undone if the candidate is evicted\n"
            "  - context: speculative\n"
            "  - cause: removed from the manifests\n"
            "  - data: not known (no bound volume seen, no PersistentVolume or StorageClass "
            "declared for it); a dynamically provisioned volume takes its StorageClass's "
            "reclaimPolicy, Delete by default: deleted with the claim; --live reads the bound "
            "volume's\n"
            "  fix: let the deletion wait for the merge: deploy this candidate with "
            "PersistentVolumeClaim app/data kept exactly as in base (base/manifests.yaml:1), so "
            "that only the merged deploy deletes it, after these checks run again: run the same "
            "gate check with --defer-to DIR, which writes that candidate to DIR, and deploy DIR "
            "(or hold the webhook's speculation fence: "
            "https://prune-gate.github.io/prune-gate/mer"
            "ge-queue/#passing-stage-2-through-the-merge-queue)"
        ),
    ),
    Code.CONSUMER_REMAINS: (
        "check",
        (
            "block CONSUMER_REMAINS PersistentVolumeClaim app/data (base/manifests.yaml:1)\n"
            "  claim app/data is removed but 1 workload(s) still use it\n"
            "  - Deployment app/web (head/manifests.yaml:1) mounts claim data in its pod template\n"
            "  - data: not known (no bound volume seen, no PersistentVolume or StorageClass "
            "declared for it); a dynamically provisioned volume takes its StorageClass's "
            "reclaimPolicy, Delete by default: deleted with the claim; --live reads the bound "
            "volume's\n"
            "  fix: remove claim data from these workloads in the same change that retires the "
            "claim (stage 1), and remove the claim only after that has deployed"
        ),
    ),
    Code.FORCED_REPLACEMENT: (
        "check",
        (
            "block FORCED_REPLACEMENT PersistentVolumeClaim app/data (base/manifests.yaml:1)\n"
            "  PersistentVolumeClaim app/data would be deleted and recreated (--force) because "
            "immutable field(s) change: spec.resources.requests.storage (10Gi -> 1Gi: shrink)\n"
            "  - spec.resources.requests.storage (10Gi -> 1Gi: shrink) differs between base and "
            "candidate\n"
            "  - force: --force\n"
            "  - data: not known (no bound volume seen, no PersistentVolume or StorageClass "
            "declared for it); a dynamically provisioned volume takes its StorageClass's "
            "reclaimPolicy, Delete by default: deleted with the claim; --live reads the bound "
            "volume's\n"
            "  fix: revert the immutable change, or create a new object under a new name and "
            "retire the old one in two stages; do not rely on force for objects that hold data"
        ),
    ),
    Code.IMMUTABLE_FIELD_CHANGE: (
        "check",
        (
            "block IMMUTABLE_FIELD_CHANGE PersistentVolumeClaim app/data (base/manifests.yaml:1)\n"
            "  PersistentVolumeClaim app/data changes immutable field(s) "
            "spec.resources.requests.storage (10Gi -> 5Gi: shrink): the API server will reject the "
            "apply and every later deploy fails the same way\n"
            "  - spec.resources.requests.storage (10Gi -> 5Gi: shrink) differs between base and "
            "candidate\n"
            "  fix: revert the change to these fields; to really change them, create a new object "
            "under a new name and retire the old one in two stages"
        ),
    ),
    Code.NAMESPACE_HOLDS_CLAIMS: (
        "check",
        (
            "block NAMESPACE_HOLDS_CLAIMS Namespace app (base/manifests.yaml:1)\n"
            "  Namespace app is deleted while it holds 1 guarded object(s): PersistentVolumeClaim "
            "app/data\n"
            "  - PersistentVolumeClaim app/data is in the namespace\n"
            "  fix: retire and remove the guarded objects in app first (two stages each), then "
            "remove the namespace"
        ),
    ),
    Code.STATEFULSET_DELETES_CLAIMS: (
        "check",
        (
            "block STATEFULSET_DELETES_CLAIMS StatefulSet app/db (base/manifests.yaml:1)\n"
            "  StatefulSet app/db has persistentVolumeClaimRetentionPolicy.whenDeleted: Delete: "
            "deleting it deletes its claims\n"
            "  - spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Delete\n"
            "  - cause: removed from the manifests\n"
            "  fix: first merge and deploy `whenDeleted: Retain` on the StatefulSet, then remove "
            "it; retire its claims separately if their data should go"
        ),
    ),
    Code.CRD_HOLDS_RESOURCES: (
        "check",
        (
            "block CRD_HOLDS_RESOURCES CustomResourceDefinition backups.example.com "
            "(base/manifests.yaml:1)\n"
            "  CustomResourceDefinition backups.example.com is deleted while 1 custom resource(s) "
            "of its kind exist; they are deleted with it\n"
            "  - Backup app/nightly exists\n"
            "  fix: remove (or migrate) the custom resources first, then the "
            "CustomResourceDefinition; to keep it, restore the manifest (base/manifests.yaml:1)"
        ),
    ),
    Code.PV_BOUND: (
        "check",
        (
            "block PV_BOUND PersistentVolume pv-data (base/manifests.yaml:1)\n"
            "  PersistentVolume pv-data is removed but is bound to claim app/data, which stays\n"
            "  - spec.claimRef: app/data\n"
            "  - PersistentVolumeClaim app/data is still declared or live\n"
            "  fix: retire the claim app/data first, or keep the volume (base/manifests.yaml:1)"
        ),
    ),
    Code.ORPHANED_BY_KEEP: (
        "check",
        (
            "warn ORPHANED_BY_KEEP PersistentVolumeClaim app/data (base/manifests.yaml:1)\n"
            "  PersistentVolumeClaim app/data leaves the manifests but carries "
            "`helm.sh/resource-policy: keep`: it stays in the cluster, unmanaged\n"
            "  - the base manifest carries `helm.sh/resource-policy: keep`\n"
            "  - cause: removed from the manifests\n"
            "  fix: if the object should go, delete it by hand after checking it: kubectl delete "
            "-n app persistentvolumeclaim/data; if it should stay, keep it in the manifests"
        ),
    ),
    Code.CLAIM_MOUNTED: (
        "check",
        (
            "block CLAIM_MOUNTED PersistentVolumeClaim app/data (base.yaml:1)\n"
            "  claim app/data is mounted by pod web-0 on node n1: the deletion would stick "
            "Terminating behind kubernetes.io/pvc-protection\n"
            "  - pod app/web-0 on node n1 (Running)\n"
            "  - data: not known (no bound volume seen, no PersistentVolume or StorageClass "
            "declared for it); a dynamically provisioned volume takes its StorageClass's "
            "reclaimPolicy, Delete by default: deleted with the claim\n"
            "  fix: stage 1 is deployed, but these pods still use the claim: remove the claim from "
            "whatever creates them (see CONSUMER_REMAINS), wait for them to go, or delete them: "
            "kubectl delete pod -n app web-0; then remove the claim"
        ),
    ),
    Code.RECLAIM_DELETE_LOSES_DATA: (
        "check",
        (
            "block RECLAIM_DELETE_LOSES_DATA PersistentVolumeClaim app/data (base.yaml:1)\n"
            "  claim app/data is bound to PersistentVolume pv-1 with reclaimPolicy Delete and no "
            "ready VolumeSnapshot: its data is destroyed with the claim\n"
            "  - PersistentVolume pv-1: persistentVolumeReclaimPolicy: Delete\n"
            "  - no VolumeSnapshot of app/data with readyToUse: true\n"
            "  fix: keep the data: kubectl patch pv pv-1 -p "
            '\'{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}\', or take a VolumeSnapshot of '
            "app/data and wait for readyToUse before removing the claim"
        ),
    ),
    Code.VOLUME_RETAINS_DATA: (
        "check",
        (
            "warn VOLUME_RETAINS_DATA PersistentVolumeClaim media/library "
            "(base/manifests.yaml:13)\n"
            "  PersistentVolumeClaim media/library would be deleted without stage 1 of retirement, "
            "but its data stays: PersistentVolume media-nfs has persistentVolumeReclaimPolicy "
            "Retain and is left Released, data intact; no new claim binds it by itself\n"
            "  - cause: removed from the manifests\n"
            "  - no `prune-gate.io/retire` annotation on the base revision\n"
            "  - data: PersistentVolume media-nfs (declared at head/manifests.yaml:1), "
            "reclaimPolicy Retain: the data stays in the volume, Released\n"
            "  fix: if the claim should go, nothing to do now: the data waits in PersistentVolume "
            "media-nfs. To use it again once the claim is gone: 1) kubectl patch pv media-nfs -p "
            '\'{"spec":{"claimRef":{"uid":null,"resourceVersion":null}}}\' (drops the old claim\'s '
            "uid, so the volume binds a claim of that name again); 2) restore the claim's manifest "
            'with spec.volumeName: media-nfs and spec.storageClassName: "" (or by hand: echo '
            '\'{"apiVersion":"v1","k'
            'ind":"PersistentVolumeCla'
            'im","metadata":{"name":"li'
            'brary","namespace":"media"},"'
            'spec":{"accessModes":["ReadWrite'
            'Many"],"resources":{"requests":{"s'
            'torage":"500Gi"}},"storageClassName":"","volumeName":"media-nfs"}}\' | kubectl create '
            "-f -). To free the storage instead: kubectl delete pv media-nfs, then remove the data "
            "from its backend. To keep the claim, keep it in the candidate and retire it in two "
            "stages"
        ),
    ),
    Code.ALREADY_TERMINATING: (
        "check",
        (
            "block ALREADY_TERMINATING PersistentVolumeClaim app/data (base.yaml:1)\n"
            "  PersistentVolumeClaim app/data is already being deleted (deletionTimestamp "
            "2026-12-01T09:00:00Z): a deploy that declares it waits on it and fails\n"
            "  - deletionTimestamp: 2026-12-01T09:00:00Z\n"
            "  - finalizers: kubernetes.io/pvc-protection\n"
            "  fix: see what holds it (kubectl get -n app persistentvolumeclaim/data -o yaml: "
            "finalizers, and for a claim the pods that still mount it); let the deletion finish "
            "before deploying this object again"
        ),
    ),
    Code.SPECULATION_FENCE: (
        "webhook",
        (
            "prune-gate SPECULATION_FENCE: PersistentVolumeClaim app/data may not be deleted by a "
            "deployer while the speculation fence is held by candidate 3f2c9a1: the candidate may "
            "be evicted and never merge. evidence: Lease prune-gate/fence held by 3f2c9a1 (expiry "
            "2026-12-03T07:04:50Z); cause: DELETE by "
            "system:serviceaccount:flux-system:kustomize-controller. fix: let the deletion happen "
            "on the merged deploy (the deployer retries it after Lease prune-gate/fence is "
            "released or expires); if candidate 3f2c9a1 is gone, release the fence: kubectl delete "
            "lease -n prune-gate fence. to delete anyway: kubectl annotate -n app "
            'persistentvolumeclaim/data prune-gate.io/allow-delete="<reason>", or act as a member '
            "of a break-glass group (sre)"
        ),
    ),
    Code.UNIDENTIFIED_OBJECT: (
        "webhook",
        (
            "prune-gate UNIDENTIFIED_OBJECT: the PersistentVolumeClaim this DELETE by "
            "kubernetes-admin in namespace app is about cannot be identified: request.name is "
            "empty and the object in the review has no metadata.name. evidence: oldObject absent, "
            "object absent. fix: delete the objects one at a time by name (kubectl delete "
            "persistentvolumeclaim NAME -n app), so that each deletion is decided on its own"
        ),
    ),
    Code.OWNER_REFERENCE_ADDED: (
        "check",
        (
            "block OWNER_REFERENCE_ADDED PersistentVolumeClaim app/data (head/manifests.yaml:1)\n"
            "  PersistentVolumeClaim app/data gets an ownerReference to ConfigMap doomed: the "
            "garbage collector deletes it when that owner goes (at once if the owner is already "
            "gone), and it was never retired\n"
            "  - ownerReference added: ConfigMap doomed uid u-1\n"
            "  - cause: changed by the candidate\n"
            "  - no `prune-gate.io/retire` annotation on the base revision\n"
            "  fix: remove the ownerReference from the manifest; if the object must go with its "
            "owner, retire it first: a merged revision annotates it "
            'prune-gate.io/retire="<reason>" and removes its consumers, then a later revision may '
            "add the reference"
        ),
    ),
    Code.RETENTION_DELETES_CLAIMS: (
        "check",
        (
            "block RETENTION_DELETES_CLAIMS StatefulSet app/db (head/manifests.yaml:1)\n"
            "  StatefulSet app/db switches persistentVolumeClaimRetentionPolicy.whenScaled from "
            "Retain to Delete: the claims of every ordinal scaled away are deleted (the "
            "StatefulSet controller gives them an owner and the garbage collector deletes them)\n"
            "  - volumeClaimTemplates: data\n"
            "  - cause: changed by the candidate\n"
            "  fix: keep whenScaled: Retain in the manifest; retire the claims that should go in "
            "two stages instead (a merged revision annotates them prune-gate.io/retire, a later "
            "one deletes them)"
        ),
    ),
    Code.OVERRIDE_IN_MANIFEST: (
        "check",
        (
            "block OVERRIDE_IN_MANIFEST PersistentVolumeClaim app/data (head/manifests.yaml:1)\n"
            "  PersistentVolumeClaim app/data gets the `prune-gate.io/allow-delete` annotation "
            "from a deploy: the override is a person's act at the moment of a deletion, not part "
            "of a manifest\n"
            '  - prune-gate.io/allow-delete: "cleanup"\n'
            "  - cause: changed by the candidate\n"
            "  fix: remove `prune-gate.io/allow-delete` from the manifest; a person who must "
            "delete the object annotates it by hand (kubectl annotate -n app "
            'persistentvolumeclaim/data prune-gate.io/allow-delete="<reason>") or acts from a '
            "break-glass group"
        ),
    ),
    Code.GUARD_TAMPERED: (
        "check",
        (
            "block GUARD_TAMPERED PersistentVolumeClaim app/data (head/manifests.yaml:1)\n"
            '  PersistentVolumeClaim app/data has label prune-gate.io/guard removed (was "true"): '
            "the webhook's objectSelector reads that label, so the change could take the object "
            "out of prune-gate's sight before it is deleted\n"
            "  - protected label (policy webhook.protectedLabels): prune-gate.io/guard\n"
            "  - cause: changed by the candidate\n"
            "  fix: keep label prune-gate.io/guard as it is live in the manifest; if the object "
            "should leave prune-gate's guard, a person relabels it (kubectl label -n app "
            "persistentvolumeclaim/data prune-gate.io/guard=... --overwrite) or the chart's "
            "webhook.objectSelector changes"
        ),
    ),
    Code.RESOURCES_UNCOUNTED: (
        "webhook",
        (
            "prune-gate RESOURCES_UNCOUNTED: CustomResourceDefinition backups.example.com is "
            "deleted but its custom resources cannot be counted; deleting it would delete any that "
            "exist. evidence: Backup.example.com: the custom resources cannot be counted: "
            "ApiError: 403 forbidden. fix: let prune-gate list this kind (the chart's "
            "rbac.countedResources), or repair the CustomResourceDefinition so its resources can "
            "be listed, then delete it again. to delete anyway: kubectl annotate "
            "customresourcedefinition.apiextensions.k8s.io/backups.example.com "
            'prune-gate.io/allow-delete="<reason>", or act as a member of a break-glass group (sre)'
        ),
    ),
    Code.RECLAIM_SWITCHED_TO_DELETE: (
        "check",
        (
            "block RECLAIM_SWITCHED_TO_DELETE PersistentVolume pv-data (head/manifests.yaml:1)\n"
            "  PersistentVolume pv-data switches persistentVolumeReclaimPolicy from Retain to "
            "Delete: the volume and its data are deleted when its claim is\n"
            "  - not bound to a claim now\n"
            "  - cause: changed by the candidate\n"
            "  fix: keep persistentVolumeReclaimPolicy: Retain in the manifest; if the data may "
            "go, a person switches it (kubectl patch pv pv-data -p "
            '\'{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}\') after taking a snapshot'
        ),
    ),
    Code.RELEASE_UNINSTALL_DELETES: (
        "check",
        (
            "block RELEASE_UNINSTALL_DELETES HelmRelease app/db (base.yaml:1)\n"
            "  HelmRelease app/db is removed: helm-controller uninstalls release app/db, which "
            "deletes 1 guarded object(s): PersistentVolumeClaim app/data-db-0\n"
            "  - release app/db (spec.releaseName, else [targetNamespace-]name)\n"
            "  - PersistentVolumeClaim app/data-db-0 carries meta.helm.sh/release-name: db, "
            "release-namespace: app\n"
            "  fix: keep the data first: add `helm.sh/resource-policy: keep` to these objects in "
            "the chart and let the upgrade deploy (Helm reads it from the stored release when it "
            "uninstalls), or retire each in two stages; then remove the HelmRelease"
        ),
    ),
    Code.RELEASE_CONTENT_UNKNOWN: (
        "check",
        (
            "warn RELEASE_CONTENT_UNKNOWN HelmRelease app/db (base/manifests.yaml:1)\n"
            "  HelmRelease app/db is removed: helm-controller uninstalls release app/db, and "
            "without the live cluster or its chart nothing says which guarded objects it holds\n"
            "  - cause: removed from the manifests\n"
            "  - release app/db\n"
            "  - chart: postgres * (latest) from HelmRepository/app/charts; not rendered (a chart "
            "from a registry is read with --fetch-charts, at a pinned version, or not at all)\n"
            "  - no live view (--live not given)\n"
            "  fix: let the gate read the chart: gate check --fetch-charts on a runner with "
            "network (a pinned chart version), or --live to see the release's guarded objects "
            "(those carrying meta.helm.sh/release-name: db); or read them with: helm get manifest "
            "db -n app"
        ),
    ),
    Code.REMOTE_CONTENT_UNKNOWN: (
        "check",
        (
            "warn REMOTE_CONTENT_UNKNOWN RemoteResource "
            "https://raw.githubusercontent.com/example/db/v1.2.0/deploy/db.yaml "
            "(apps/db/kustomization.yaml:4)\n"
            "  the candidate no longer builds remote resource "
            "https://raw.githubusercontent.com/example/db/v1.2.0/deploy/db.yaml from "
            "apps/db/kustomization.yaml (removed, or its URL changed): Flux prunes whatever it "
            "held and the candidate no longer declares, and offline nothing says what that is\n"
            "  - base: apps/db/kustomization.yaml names "
            "https://raw.githubusercontent.com/example/db/v1.2.0/deploy/db.yaml; candidate: it "
            "does not\n"
            "  - not fetched (offline)\n"
            "  fix: run gate check with --fetch-remote on a runner with network: both URLs are "
            "fetched and the objects judged; or vendor the file into the repository"
        ),
    ),
    Code.KUSTOMIZATION_PRUNES_GUARDED: (
        "check",
        (
            "block KUSTOMIZATION_PRUNES_GUARDED Kustomization flux-system/apps (base.yaml:1)\n"
            "  Kustomization flux-system/apps is removed with pruning on: kustomize-controller "
            "deletes what it applied, which includes 1 guarded object(s): PersistentVolumeClaim "
            "app/data\n"
            "  - spec.prune: true, spec.deletionPolicy: MirrorPrune (live)\n"
            "  - PersistentVolumeClaim app/data is listed in status.inventory of Kustomization "
            "flux-system/apps\n"
            "  fix: set `spec.deletionPolicy: Orphan` on the Kustomization, merge and let it "
            "deploy, then remove it; or move these objects to another Kustomization in two stages "
            "(mark them `kustomize.toolkit.fluxcd.io/prune: disabled` where it applies them and "
            "let that deploy, then move them: see FLUX_MOVE_PRUNES), or retire them in two stages "
            "first"
        ),
    ),
    Code.KUSTOMIZATION_REMOVED: (
        "check",
        (
            "block KUSTOMIZATION_REMOVED Kustomization flux-system/paperless "
            "(base/manifests.yaml:1)\n"
            "  Kustomization flux-system/paperless is removed with pruning on: "
            "kustomize-controller deletes everything it applied (spec.path "
            "./kubernetes/apps/default/paperless/app), and these manifests do not say what that "
            "is\n"
            "  - cause: removed from the manifests\n"
            "  - spec.prune: true, spec.deletionPolicy: MirrorPrune (base manifest)\n"
            "  - its build was not read (no --flux-root) and there is no live view (--live not "
            "given)\n"
            "  fix: check it with the Flux entry point, which reads what the Kustomization applied "
            "and judges each object (gate check --flux-root DIR, the directory of your cluster's "
            "flux-system Kustomization), or with --live; to remove it safely, set `spec.prune: "
            "false` (or `spec.deletionPolicy: Orphan`) on it first, merge and let it deploy, then "
            "remove it; or retire its guarded objects in two stages first"
        ),
    ),
    Code.APPLICATION_DELETES_RESOURCES: (
        "check",
        (
            "block APPLICATION_DELETES_RESOURCES Application argocd/shop (base.yaml:1)\n"
            "  Application argocd/shop is removed with the resources finalizer: Argo CD deletes "
            "what it synced, which includes 1 guarded object(s): PersistentVolumeClaim app/data\n"
            "  - finalizer resources-finalizer.argocd.argoproj.io (live)\n"
            "  - PersistentVolumeClaim app/data is listed in status.resources of Application "
            "argocd/shop\n"
            "  fix: remove the resources finalizer from the Application (in its manifest, merged "
            "and deployed, or: kubectl patch -n argocd application.argoproj.io/shop --type merge "
            '-p \'{"metadata":{"finalizers":null}}\'), or mark these objects '
            "`argocd.argoproj.io/sync-options: Delete=false`, then remove the Application; or "
            "retire them in two stages first"
        ),
    ),
    Code.OWNER_DELETES_DEPENDENTS: (
        "check",
        (
            "block OWNER_DELETES_DEPENDENTS Database app/db (base.yaml:1)\n"
            "  Database app/db is removed: the garbage collector deletes its dependents, which "
            "include 1 guarded object(s): PersistentVolumeClaim app/db-1\n"
            "  - cause: removed from the manifests\n"
            "  - PersistentVolumeClaim app/db-1 has an ownerReference to Database app/db and no "
            "other owner that stays\n"
            "  fix: keep Database app/db in the candidate until its dependents are safe: remove "
            "the ownerReference from each (e.g. kubectl patch -n app persistentvolumeclaim/db-1 "
            '--type json -p \'[{"op":"remove","path":"/metadata/ownerReferences"}]\'; its operator '
            "may have a setting that stops it putting it back), or retire them in two stages; then "
            "remove it"
        ),
    ),
    Code.MASS_PRUNE: (
        "check",
        (
            "block MASS_PRUNE ConfigMap default/c0 (base/manifests.yaml:1)\n"
            "  the input loses every one of its objects at once: a broken path or render looks "
            "like this, and the deployer would prune them all\n"
            "  - base: 5 object(s) in the input; candidate: 0 of them remain\n"
            "  - ConfigMap default/c0 is removed\n"
            "  - ConfigMap default/c1 is removed\n"
            "  - ConfigMap default/c2 is removed\n"
            "  - ConfigMap default/c3 is removed\n"
            "  - ConfigMap default/c4 is removed\n"
            "  fix: check that the input still builds what it should (the --path given, its "
            "kustomization, the renderer's output); if the removal is meant, make it in smaller "
            "changes, or exempt this one (exemptions with codes: [MASS_PRUNE])"
        ),
    ),
    Code.FORCE_DISABLED_VOID: (
        "check",
        (
            "warn FORCE_DISABLED_VOID PersistentVolumeClaim db/data (head/apps/db/claim.yaml:1)\n"
            "  PersistentVolumeClaim db/data carries kustomize.toolkit.fluxcd.io/force: disabled, "
            "which does nothing: Kustomization flux-system/apps has spec.force: true, so Flux "
            "still deletes and recreates it on an immutable change\n"
            "  - Kustomization flux-system/apps: spec.force: true (head/k.yaml:1)\n"
            "  - PersistentVolumeClaim db/data: kustomize.toolkit.fluxcd.io/force: disabled\n"
            "  fix: turn force off on Kustomization flux-system/apps (spec.force: false) and mark "
            "the objects that need it with kustomize.toolkit.fluxcd.io/force: enabled, or move "
            "this object to a Kustomization without force"
        ),
    ),
    Code.FLUX_MOVE_PRUNES: (
        "check",
        (
            "block FLUX_MOVE_PRUNES PersistentVolumeClaim shop/data (apps/prod/claim.yaml:1)\n"
            "  PersistentVolumeClaim shop/data moves from Kustomization flux-system/apps to "
            "Kustomization flux-system/db: kustomize-controller's prune of apps deletes it unless "
            "db has applied it first, and db then creates it again, empty; db has dependsOn apps, "
            "so apps always reconciles first and deletes it\n"
            "  - base: Kustomization flux-system/apps applies it (apps/prod/claim.yaml:1); "
            "candidate: Kustomization flux-system/db applies it (apps/db/claim.yaml:1)\n"
            "  - Kustomization flux-system/apps: spec.prune: true (base, candidate)\n"
            "  - no `kustomize.toolkit.fluxcd.io/prune: disabled` on the base revision\n"
            "  - apps prunes a live object that still carries its labels "
            "kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: "
            "flux-system and not `kustomize.toolkit.fluxcd.io/prune: disabled`\n"
            "  fix: move it in two stages: 1) keep it where Kustomization flux-system/apps applies "
            "it (apps/prod/claim.yaml:1), annotate it `kustomize.toolkit.fluxcd.io/prune: "
            "disabled` there, merge and let it deploy; 2) then move it to Kustomization "
            "flux-system/db (the mark may go in the same change: apps skips it while the live "
            "object carries it, and once db has applied it, its labels name db)"
        ),
    ),
}
