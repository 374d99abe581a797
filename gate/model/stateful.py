"""Stateful custom kinds guarded by default, and what deleting one does to its data.

Guarding PersistentVolumeClaims alone misses the commonest loss: a prune that deletes a database
operator's cluster object. Some operators give their claims an ownerReference to that object, so
the garbage collector deletes the claims with it; others delete the claims from a finalizer; the
rest leave them behind, with a cluster that is gone. Either way the object is the data's handle,
and its CustomResourceDefinition is rarely in the same diff, so the kinds are known here.

Every entry was read in its operator's code or docs (`source`, as read in 2026): `claims` says
what deletion does to the claims or data, `protection` the operator's own guard against a deletion,
if it has one. An operator's settings can change `claims`; none of them makes a prune safe to pass
unseen. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StatefulKind:
    """A custom kind whose objects hold or own data, as its operator treats a deletion."""

    #: API group, e.g. "postgresql.cnpg.io".
    group: str
    #: Kind as the CRD names it, e.g. "Cluster".
    kind: str
    #: The CRD's plural resource name, e.g. "clusters": webhook rules match on it.
    plural: str
    #: The operator that serves the kind.
    operator: str
    #: What deleting an object does to its claims or data, in one line.
    claims: str
    #: The operator's own protection against deleting an object, or None when it has none.
    protection: str | None
    #: The https URL of the code or docs that say so.
    source: str

    @property
    def name(self) -> str:
        """`Kind.group`, as policies and messages spell a custom kind."""
        return f"{self.kind}.{self.group}"


_OT_REDIS = "OT-Container-Kit Redis Operator"
_OT_REDIS_CLAIMS = (
    "the operator's finalizer deletes its PVCs with it, unless spec.storage.keepAfterDelete is true"
)
_OT_REDIS_SOURCE = (
    "https://github.com/OT-CONTAINER-KIT/redis-operator/blob/main/internal/k8sutils/finalizer.go"
)
_STRIMZI_SOURCE = (
    "https://github.com/strimzi/strimzi-kafka-operator/blob/main/cluster-operator/src/main/java/"
    "io/strimzi/operator/cluster/model/PersistentVolumeClaimUtils.java"
)

#: The catalogue, by operator.
CATALOGUE: tuple[StatefulKind, ...] = (
    StatefulKind(
        group="postgresql.cnpg.io",
        kind="Cluster",
        plural="clusters",
        operator="CloudNativePG",
        claims=(
            "each instance's PVCs carry a controller ownerReference to the Cluster: the garbage "
            "collector deletes them with it"
        ),
        protection=None,
        source=(
            "https://github.com/cloudnative-pg/cloudnative-pg/blob/main/pkg/reconciler/"
            "persistentvolumeclaim/build.go"
        ),
    ),
    StatefulKind(
        group="postgres-operator.crunchydata.com",
        kind="PostgresCluster",
        plural="postgresclusters",
        operator="Crunchy Postgres for Kubernetes (PGO)",
        claims=(
            "its pgdata PVCs carry a controller ownerReference to the PostgresCluster: the garbage "
            "collector deletes them with it, and only a Retain reclaim policy keeps the volumes"
        ),
        protection=None,
        source=(
            "https://github.com/CrunchyData/postgres-operator/blob/main/internal/controller/"
            "postgrescluster/postgres.go"
        ),
    ),
    StatefulKind(
        group="acid.zalan.do",
        kind="postgresql",
        plural="postgresqls",
        operator="Zalando Postgres Operator",
        claims=(
            "its PVCs carry no ownerReference, but the operator's delete loop removes them "
            "(enable_persistent_volume_claim_deletion, true by default)"
        ),
        protection=(
            "delete_annotation_date_key and delete_annotation_name_key in the operator "
            "configuration (unset by default): without the annotations the operator keeps the "
            "child resources, though the postgresql object itself is still deleted"
        ),
        source="https://github.com/zalando/postgres-operator/blob/master/docs/administrator.md",
    ),
    StatefulKind(
        group="mysql.oracle.com",
        kind="InnoDBCluster",
        plural="innodbclusters",
        operator="MySQL Operator for Kubernetes",
        claims=(
            "its datadir PVCs come from StatefulSet volumeClaimTemplates with no retention policy "
            "or ownerReference: they stay behind, without the cluster"
        ),
        protection=None,
        source=(
            "https://github.com/mysql/mysql-operator/blob/trunk/mysqloperator/controller/"
            "innodbcluster/cluster_objects.py"
        ),
    ),
    StatefulKind(
        group="k8s.mariadb.com",
        kind="MariaDB",
        plural="mariadbs",
        operator="mariadb-operator",
        claims=(
            "its PVCs come from StatefulSet volumeClaimTemplates and stay behind, unless "
            "spec.storage.pvcRetentionPolicy.whenDeleted is Delete (Kubernetes 1.32 and later)"
        ),
        protection=None,
        source=(
            "https://github.com/mariadb-operator/mariadb-operator/blob/main/pkg/builder/"
            "statefulset_builder.go"
        ),
    ),
    StatefulKind(
        group="pxc.percona.com",
        kind="PerconaXtraDBCluster",
        plural="perconaxtradbclusters",
        operator="Percona Operator for MySQL (XtraDB Cluster)",
        claims=(
            "its PVCs stay behind, unless it carries the finalizer percona.com/delete-pxc-pvc "
            "(percona.com/delete-proxysql-pvc for ProxySQL's), with which the operator deletes them"
        ),
        protection=None,
        source=(
            "https://github.com/percona/percona-xtradb-cluster-operator/blob/main/pkg/controller/"
            "pxc/controller.go"
        ),
    ),
    StatefulKind(
        group="psmdb.percona.com",
        kind="PerconaServerMongoDB",
        plural="perconaservermongodbs",
        operator="Percona Operator for MongoDB",
        claims=(
            "its PVCs stay behind, unless it carries the finalizer percona.com/delete-psmdb-pvc, "
            "with which the operator deletes them"
        ),
        protection=None,
        source=(
            "https://github.com/percona/percona-server-mongodb-operator/blob/main/pkg/controller/"
            "perconaservermongodb/finalizers.go"
        ),
    ),
    StatefulKind(
        group="pgv2.percona.com",
        kind="PerconaPGCluster",
        plural="perconapgclusters",
        operator="Percona Operator for PostgreSQL",
        claims=(
            "its data PVCs carry no ownerReference (left out on purpose) and stay behind, unless "
            "it carries the finalizer percona.com/delete-pvc, which deletes them and user secrets"
        ),
        protection=None,
        source=(
            "https://github.com/percona/percona-postgresql-operator/blob/main/percona/controller/"
            "pgcluster/finalizer.go"
        ),
    ),
    StatefulKind(
        group="mongodbcommunity.mongodb.com",
        kind="MongoDBCommunity",
        plural="mongodbcommunity",
        operator="MongoDB Community Operator",
        claims=(
            "the operator's docs say the persistent volumes remain when the resource is deleted: "
            "its PVCs come from StatefulSet volumeClaimTemplates"
        ),
        protection=None,
        source=(
            "https://github.com/mongodb/mongodb-kubernetes-operator/blob/master/docs/"
            "deploy-configure.md"
        ),
    ),
    StatefulKind(
        group="redis.redis.opstreelabs.in",
        kind="Redis",
        plural="redis",
        operator=_OT_REDIS,
        claims=_OT_REDIS_CLAIMS,
        protection=None,
        source=_OT_REDIS_SOURCE,
    ),
    StatefulKind(
        group="redis.redis.opstreelabs.in",
        kind="RedisCluster",
        plural="redisclusters",
        operator=_OT_REDIS,
        claims=_OT_REDIS_CLAIMS,
        protection=None,
        source=_OT_REDIS_SOURCE,
    ),
    StatefulKind(
        group="redis.redis.opstreelabs.in",
        kind="RedisReplication",
        plural="redisreplications",
        operator=_OT_REDIS,
        claims=_OT_REDIS_CLAIMS,
        protection=None,
        source=_OT_REDIS_SOURCE,
    ),
    StatefulKind(
        group="hyperspike.io",
        kind="Valkey",
        plural="valkeys",
        operator="Hyperspike Valkey Operator",
        claims=(
            "its PVCs come from StatefulSet volumeClaimTemplates with no retention policy: they "
            "stay behind, without the Valkey"
        ),
        protection=None,
        source=(
            "https://github.com/hyperspike/valkey-operator/blob/main/internal/controller/"
            "valkey_controller.go"
        ),
    ),
    StatefulKind(
        group="valkey.io",
        kind="ValkeyCluster",
        plural="valkeyclusters",
        operator="Valkey Operator (valkey-io)",
        claims=(
            "the garbage collector deletes its ValkeyNodes; each node's PVC stays behind unless "
            "spec.persistence.reclaimPolicy is Delete (default Retain), when a finalizer deletes it"
        ),
        protection=None,
        source=(
            "https://github.com/valkey-io/valkey-operator/blob/main/internal/controller/"
            "valkeynode_persistence.go"
        ),
    ),
    StatefulKind(
        group="dragonflydb.io",
        kind="Dragonfly",
        plural="dragonflies",
        operator="Dragonfly Operator",
        claims=(
            "its snapshot and tiering PVCs come from StatefulSet volumeClaimTemplates with no "
            "retention policy: they stay behind, without the Dragonfly"
        ),
        protection=None,
        source=(
            "https://github.com/dragonflydb/dragonfly-operator/blob/main/internal/resources/"
            "resources.go"
        ),
    ),
    StatefulKind(
        group="rabbitmq.com",
        kind="RabbitmqCluster",
        plural="rabbitmqclusters",
        operator="RabbitMQ Cluster Operator",
        claims=(
            "its PVCs go with it: the StatefulSet's claim retention is whenDeleted: Delete unless "
            "spec.override.statefulSet changes it (older releases owned the PVCs directly)"
        ),
        protection=None,
        source=(
            "https://github.com/rabbitmq/cluster-operator/blob/main/internal/resource/"
            "statefulset.go"
        ),
    ),
    StatefulKind(
        group="kafka.strimzi.io",
        kind="Kafka",
        plural="kafkas",
        operator="Strimzi",
        claims=(
            "deleting it stops every broker; its PVCs carry no ownerReference to the Kafka (their "
            "KafkaNodePool owns them when deleteClaim is true) and otherwise stay behind"
        ),
        protection=None,
        source=_STRIMZI_SOURCE,
    ),
    StatefulKind(
        group="kafka.strimzi.io",
        kind="KafkaNodePool",
        plural="kafkanodepools",
        operator="Strimzi",
        claims=(
            "volumes with deleteClaim: true give their PVCs an ownerReference to the pool, so the "
            "garbage collector deletes them with it; deleteClaim defaults to false, keeping them"
        ),
        protection=None,
        source=_STRIMZI_SOURCE,
    ),
    StatefulKind(
        group="elasticsearch.k8s.elastic.co",
        kind="Elasticsearch",
        plural="elasticsearches",
        operator="Elastic Cloud on Kubernetes (ECK)",
        claims=(
            "under the default volumeClaimDeletePolicy, DeleteOnScaledownAndClusterDeletion, its "
            "PVCs carry an ownerReference to it and go with it; DeleteOnScaledownOnly keeps them"
        ),
        protection=None,
        source=(
            "https://github.com/elastic/cloud-on-k8s/blob/main/pkg/controller/elasticsearch/"
            "driver/stateful/pvc_owner.go"
        ),
    ),
    StatefulKind(
        group="clickhouse.altinity.com",
        kind="ClickHouseInstallation",
        plural="clickhouseinstallations",
        operator="Altinity ClickHouse Operator",
        claims=(
            "its PVCs carry no ownerReference, but on deletion the operator deletes those whose "
            "volumeClaimTemplate reclaimPolicy is Delete, the default; Retain keeps them"
        ),
        protection=None,
        source=(
            "https://github.com/Altinity/clickhouse-operator/blob/master/pkg/model/common/volume/"
            "deleter.go"
        ),
    ),
    StatefulKind(
        group="longhorn.io",
        kind="Volume",
        plural="volumes",
        operator="Longhorn",
        claims=(
            "it is the volume itself: on deletion the operator deletes its engines, replicas and "
            "snapshots, that is the data behind any PV that uses it"
        ),
        protection=None,
        source=(
            "https://github.com/longhorn/longhorn-manager/blob/master/controller/"
            "volume_controller.go"
        ),
    ),
    StatefulKind(
        group="ceph.rook.io",
        kind="CephCluster",
        plural="cephclusters",
        operator="Rook",
        claims=(
            "the data on hosts and OSD disks stays, unless spec.cleanupPolicy.confirmation is "
            "yes-really-destroy-data: then the operator wipes it on deletion"
        ),
        protection=(
            "the operator holds the deletion while other Rook resources reference the cluster, and "
            "while PVs it provisioned exist (unless cleanupPolicy.allowUninstallWithVolumes)"
        ),
        source=(
            "https://github.com/rook/rook/blob/master/Documentation/CRDs/Cluster/"
            "ceph-cluster-crd.md"
        ),
    ),
    StatefulKind(
        group="ceph.rook.io",
        kind="CephBlockPool",
        plural="cephblockpools",
        operator="Rook",
        claims="deleting it deletes the Ceph pool, which holds the RBD images behind its PVs",
        protection=(
            "the operator holds the deletion while the pool has images or dependents; the "
            "annotation rook.io/force-deletion: true makes it clean the images out instead"
        ),
        source="https://github.com/rook/rook/blob/master/pkg/operator/ceph/pool/controller.go",
    ),
    StatefulKind(
        group="ceph.rook.io",
        kind="CephFilesystem",
        plural="cephfilesystems",
        operator="Rook",
        claims=(
            "deleting it removes the Ceph filesystem and its pools, unless "
            "spec.preserveFilesystemOnDelete is true (default false)"
        ),
        protection=(
            "the operator holds the deletion while subvolume groups hold subvolumes (CephFS PVCs, "
            "NFS exports) or a CephFilesystemSubVolumeGroup names the filesystem"
        ),
        source=(
            "https://github.com/rook/rook/blob/master/Documentation/CRDs/Shared-Filesystem/"
            "ceph-filesystem-crd.md"
        ),
    ),
    StatefulKind(
        group="ceph.rook.io",
        kind="CephObjectStore",
        plural="cephobjectstores",
        operator="Rook",
        claims=(
            "deleting it deletes the pools behind the store, unless spec.preservePoolsOnDelete "
            "is true (default false)"
        ),
        protection="the operator holds the deletion while the store has buckets",
        source=(
            "https://github.com/rook/rook/blob/master/Documentation/CRDs/Object-Storage/"
            "ceph-object-store-crd.md"
        ),
    ),
    StatefulKind(
        group="minio.min.io",
        kind="Tenant",
        plural="tenants",
        operator="MinIO Operator",
        claims=(
            "the operator's docs say it leaves the PVCs (from StatefulSet volumeClaimTemplates) "
            "for the user to delete: they stay behind, without the Tenant"
        ),
        protection=None,
        source="https://github.com/minio/operator/blob/master/docs/tenant-storage-deletion.md",
    ),
    StatefulKind(
        group="moco.cybozu.com",
        kind="MySQLCluster",
        plural="mysqlclusters",
        operator="MOCO",
        claims=(
            "its volumeClaimTemplates carry a controller ownerReference to the MySQLCluster: the "
            "garbage collector deletes the PVCs with it"
        ),
        protection=None,
        source="https://github.com/cybozu-go/moco/blob/main/controllers/mysqlcluster_controller.go",
    ),
    StatefulKind(
        group="planetscale.com",
        kind="VitessCluster",
        plural="vitessclusters",
        operator="Vitess Operator (PlanetScale)",
        claims=(
            "its tablet PVCs are owned by VitessShards, owned by VitessKeyspaces, owned by the "
            "VitessCluster: the garbage collector deletes them with it"
        ),
        protection=None,
        source=(
            "https://github.com/planetscale/vitess-operator/blob/main/pkg/controller/vitessshard/"
            "reconcile_tablets.go"
        ),
    ),
)

_BY_KIND: dict[tuple[str, str], StatefulKind] = {(k.group, k.kind): k for k in CATALOGUE}


def catalogued(group: str, kind: str) -> StatefulKind | None:
    """The catalogue's entry for `kind` in `group`, or None. Kinds are case-sensitive, as the API
    server has them: `postgresql.acid.zalan.do` is one, `Postgresql.acid.zalan.do` none."""
    return _BY_KIND.get((group, kind))
