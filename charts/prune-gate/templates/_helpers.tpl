{{/* Chart name, truncated to 63 characters. */}}
{{- define "prune-gate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: RELEASE-CHART, or RELEASE when it already contains the chart name. */}}
{{- define "prune-gate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart label: NAME-VERSION. */}}
{{- define "prune-gate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "prune-gate.labels" -}}
helm.sh/chart: {{ include "prune-gate.chart" . }}
{{ include "prune-gate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission-webhook
app.kubernetes.io/part-of: prune-gate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the webhook pods. */}}
{{- define "prune-gate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prune-gate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "prune-gate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "prune-gate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Service's DNS name the API server calls, and the certificate is for. */}}
{{- define "prune-gate.serviceHost" -}}
{{- printf "%s.%s.svc" (include "prune-gate.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "prune-gate.webhookName" -}}
{{- default (include "prune-gate.fullname" .) .Values.webhook.name }}
{{- end }}

{{/* Name of the Secret with tls.crt and tls.key (and ca.crt, except in mode secret). */}}
{{- define "prune-gate.tlsSecretName" -}}
{{- if eq .Values.tls.mode "secret" }}
{{- required "tls.secret.name is required with tls.mode=secret" .Values.tls.secret.name }}
{{- else }}
{{- printf "%s-tls" (include "prune-gate.fullname" .) }}
{{- end }}
{{- end }}

{{- define "prune-gate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The stateful custom kinds (gate/model/stateful.py CATALOGUE, the one table; tests/unit/
test_register_updates.py compares): `Kind.group` -> [group, plural], as JSON. Guarded by default
at the webhook, so their rules are known without their CRDs (a rule may name a resource no CRD
serves yet: it matches once one does), and read by the webhook's ClusterRole (rbac.yaml).
*/}}
{{- define "prune-gate.statefulKinds" -}}
{{- dict
  "Cluster.postgresql.cnpg.io" (list "postgresql.cnpg.io" "clusters")
  "PostgresCluster.postgres-operator.crunchydata.com" (list "postgres-operator.crunchydata.com" "postgresclusters")
  "postgresql.acid.zalan.do" (list "acid.zalan.do" "postgresqls")
  "InnoDBCluster.mysql.oracle.com" (list "mysql.oracle.com" "innodbclusters")
  "MariaDB.k8s.mariadb.com" (list "k8s.mariadb.com" "mariadbs")
  "PerconaXtraDBCluster.pxc.percona.com" (list "pxc.percona.com" "perconaxtradbclusters")
  "PerconaServerMongoDB.psmdb.percona.com" (list "psmdb.percona.com" "perconaservermongodbs")
  "PerconaPGCluster.pgv2.percona.com" (list "pgv2.percona.com" "perconapgclusters")
  "MongoDBCommunity.mongodbcommunity.mongodb.com" (list "mongodbcommunity.mongodb.com" "mongodbcommunity")
  "Redis.redis.redis.opstreelabs.in" (list "redis.redis.opstreelabs.in" "redis")
  "RedisCluster.redis.redis.opstreelabs.in" (list "redis.redis.opstreelabs.in" "redisclusters")
  "RedisReplication.redis.redis.opstreelabs.in" (list "redis.redis.opstreelabs.in" "redisreplications")
  "Valkey.hyperspike.io" (list "hyperspike.io" "valkeys")
  "ValkeyCluster.valkey.io" (list "valkey.io" "valkeyclusters")
  "Dragonfly.dragonflydb.io" (list "dragonflydb.io" "dragonflies")
  "RabbitmqCluster.rabbitmq.com" (list "rabbitmq.com" "rabbitmqclusters")
  "Kafka.kafka.strimzi.io" (list "kafka.strimzi.io" "kafkas")
  "KafkaNodePool.kafka.strimzi.io" (list "kafka.strimzi.io" "kafkanodepools")
  "Elasticsearch.elasticsearch.k8s.elastic.co" (list "elasticsearch.k8s.elastic.co" "elasticsearches")
  "ClickHouseInstallation.clickhouse.altinity.com" (list "clickhouse.altinity.com" "clickhouseinstallations")
  "Volume.longhorn.io" (list "longhorn.io" "volumes")
  "CephCluster.ceph.rook.io" (list "ceph.rook.io" "cephclusters")
  "CephBlockPool.ceph.rook.io" (list "ceph.rook.io" "cephblockpools")
  "CephFilesystem.ceph.rook.io" (list "ceph.rook.io" "cephfilesystems")
  "CephObjectStore.ceph.rook.io" (list "ceph.rook.io" "cephobjectstores")
  "Tenant.minio.min.io" (list "minio.min.io" "tenants")
  "MySQLCluster.moco.cybozu.com" (list "moco.cybozu.com" "mysqlclusters")
  "VitessCluster.planetscale.com" (list "planetscale.com" "vitessclusters") | toJson }}
{{- end }}

{{/*
The webhook's rules: one rule per API group, naming the guarded kinds' resources
(the same derivation as `gate webhook serve --register`). From `webhook.rules` when set, else from
`policy.webhook.guardedKinds`, else the default guarded kinds (the stateful kinds among them).
*/}}
{{- define "prune-gate.webhookRules" -}}
{{- /* gate/kube/resources.py RESOURCES and the stateful kinds: webhook/register.py PLURALS, the
one table (tests/unit/test_register_updates.py compares) */}}
{{- $stateful := include "prune-gate.statefulKinds" . | fromJson }}
{{- $known := merge (dict
  "Namespace" (list "" "namespaces")
  "CustomResourceDefinition.apiextensions.k8s.io" (list "apiextensions.k8s.io" "customresourcedefinitions")
  "PersistentVolume" (list "" "persistentvolumes")
  "PersistentVolumeClaim" (list "" "persistentvolumeclaims")
  "Pod" (list "" "pods")
  "StatefulSet.apps" (list "apps" "statefulsets")
  "Deployment.apps" (list "apps" "deployments")
  "DaemonSet.apps" (list "apps" "daemonsets")
  "ReplicaSet.apps" (list "apps" "replicasets")
  "Job.batch" (list "batch" "jobs")
  "CronJob.batch" (list "batch" "cronjobs")
  "VolumeSnapshot.snapshot.storage.k8s.io" (list "snapshot.storage.k8s.io" "volumesnapshots")) $stateful }}
{{- $rules := list }}
{{- if .Values.webhook.rules }}
{{- range .Values.webhook.rules }}
{{- $rules = append $rules (dict "apiGroups" .apiGroups "resources" .resources) }}
{{- end }}
{{- else }}
{{- /* gate/engine/policy.py: DEFAULT_GUARDED (one default for both doors) and CASCADE_KINDS,
the kinds whose deletion takes guarded objects with it (`webhook_kinds_for`) */}}
{{- $cascades := list "Namespace" "StatefulSet.apps" "CustomResourceDefinition.apiextensions.k8s.io" }}
{{- $guarded := concat (list "PersistentVolumeClaim" "PersistentVolume" "VolumeSnapshot.snapshot.storage.k8s.io") (keys $stateful | sortAlpha) }}
{{- $policy := .Values.policy | default dict }}
{{- $key := "policy.webhook.guardedKinds" }}
{{- if hasKey $policy "guardedKinds" }}
{{- $guarded = $policy.guardedKinds }}
{{- $key = "policy.guardedKinds" }}
{{- end }}
{{- $kinds := concat $guarded $cascades | uniq }}
{{- $wh := $policy.webhook | default dict }}
{{- if hasKey $wh "guardedKinds" }}
{{- $kinds = $wh.guardedKinds }}
{{- $key = "policy.webhook.guardedKinds" }}
{{- end }}
{{- $byGroup := dict }}
{{- range $kinds }}
{{- $gr := get $known . }}
{{- if not $gr }}
{{- /* A guessed plural (`ingresss`) would match nothing: the kind would go unguarded. */}}
{{- fail (printf "%s: %s has no known resource name, so no webhook rule can name it; list it in webhook.rules ({apiGroups: [...], resources: [...]})" $key .) }}
{{- end }}
{{- $g := index $gr 0 }}
{{- $_ := set $byGroup $g (append (get $byGroup $g | default list) (index $gr 1) | uniq | sortAlpha) }}
{{- end }}
{{- range $g, $resources := $byGroup }}
{{- $rules = append $rules (dict "apiGroups" (list $g) "resources" $resources) }}
{{- end }}
{{- end }}
{{- range $rules }}
- apiGroups: {{ toJson .apiGroups }}
  apiVersions: ["*"]
  operations: ["DELETE"]
  resources: {{ toJson .resources }}
  scope: "*"
{{- end }}
{{- end }}

{{/*
The label keys the webhook's objectSelector reads, after policy.webhook.protectedLabels: a
deployer may not add, change or remove them on a guarded object (gate/updates.py), or one
relabel would take the object out of the webhook's sight. A JSON list.
*/}}
{{- define "prune-gate.protectedLabels" -}}
{{- $keys := list }}
{{- $wh := (.Values.policy | default dict).webhook | default dict }}
{{- range ($wh.protectedLabels | default list) }}{{ $keys = append $keys . }}{{ end }}
{{- $sel := .Values.webhook.objectSelector | default dict }}
{{- range $k, $_ := ($sel.matchLabels | default dict) }}{{ $keys = append $keys $k }}{{ end }}
{{- range ($sel.matchExpressions | default list) }}{{ $keys = append $keys .key }}{{ end }}
{{- toJson ($keys | uniq) }}
{{- end }}

{{/*
The policy the webhook reads: `policy`, with the protected labels above.
*/}}
{{- define "prune-gate.policy" -}}
{{- $policy := deepCopy (.Values.policy | default dict) }}
{{- /* the policy file's format (gate config migrate); toYaml sorts it first */}}
{{- $_ := set $policy "apiVersion" "prune-gate.io/v1" }}
{{- $keys := include "prune-gate.protectedLabels" . | fromJsonArray }}
{{- if $keys }}
{{- $wh := $policy.webhook | default dict }}
{{- $_ := set $wh "protectedLabels" $keys }}
{{- $_ := set $policy "webhook" $wh }}
{{- end }}
{{- toYaml $policy }}
{{- end }}

{{/*
The failurePolicy rendered for one webhook entry: Fail only when the operator chose Fail and the
live entry (`live`, from `lookup`; absent on install and in `helm template`) is armed already
and still calls the same service with the same caBundle; Ignore otherwise, for the webhook to
arm once a pod that this caBundle verifies is Ready (webhook/arm.py).
*/}}
{{- define "prune-gate.renderedFailurePolicy" -}}
{{- $policy := "Ignore" }}
{{- $l := .live | default dict }}
{{- if and (eq .chosen "Fail") (eq ($l.failurePolicy | default "") "Fail") }}
{{- $cc := $l.clientConfig | default dict }}
{{- $svc := $cc.service | default dict }}
{{- $same := and (eq ($svc.name | default "") .service) (eq ($svc.namespace | default "") .namespace) (eq ($svc.path | default "") "/validate") (eq (toString ($svc.port | default 443)) (toString .port)) }}
{{- if and $same (or (not .caBundle) (eq ($cc.caBundle | default "") .caBundle)) }}
{{- $policy = "Fail" }}
{{- end }}
{{- end }}
{{- $policy }}
{{- end }}
