"""The catalogue of stateful custom kinds is well formed, and finds what it lists.

Webhook rules are built from `plural`, so a plural that is not the CRD's would guard nothing; a
built-in group in the catalogue would shadow the built-in checks; a (group, kind) listed twice
would make `catalogued()` answer for one entry only.
"""

from __future__ import annotations

import re

import pytest

from gate.model.kinds import BUILTIN_KINDS
from gate.model.stateful import CATALOGUE, StatefulKind, catalogued

#: Plurals that are not the kind plus s/es/ies, as the CRDs declare them.
IRREGULAR_PLURALS = {
    ("redis.redis.opstreelabs.in", "Redis"): "redis",
    ("mongodbcommunity.mongodb.com", "MongoDBCommunity"): "mongodbcommunity",
}

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")


def _regular_plurals(kind: str) -> set[str]:
    low = kind.lower()
    plurals = {low + "s", low + "es"}
    if low.endswith("y"):
        plurals.add(low[:-1] + "ies")
    return plurals


def _ids(entry: StatefulKind) -> str:
    return entry.name


def test_the_catalogue_is_not_empty_and_its_keys_are_unique() -> None:
    keys = [(k.group, k.kind) for k in CATALOGUE]
    assert len(keys) >= 20
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]
    plurals = [(k.group, k.plural) for k in CATALOGUE]
    assert len(plurals) == len(set(plurals)), [p for p in plurals if plurals.count(p) > 1]


@pytest.mark.parametrize("entry", CATALOGUE, ids=_ids)
def test_an_entry_is_a_custom_kind_in_a_custom_group(entry: StatefulKind) -> None:
    assert entry.group not in BUILTIN_KINDS
    assert DNS_SUBDOMAIN.match(entry.group), entry.group
    assert entry.kind and entry.kind == entry.kind.strip() and " " not in entry.kind


@pytest.mark.parametrize("entry", CATALOGUE, ids=_ids)
def test_the_plural_is_lowercase_and_a_plural_of_the_kind(entry: StatefulKind) -> None:
    assert entry.plural == entry.plural.lower()
    irregular = IRREGULAR_PLURALS.get((entry.group, entry.kind))
    if irregular is not None:
        assert entry.plural == irregular
    else:
        assert entry.plural in _regular_plurals(entry.kind), entry.plural


@pytest.mark.parametrize("entry", CATALOGUE, ids=_ids)
def test_the_text_fields_are_one_line_and_the_source_an_https_url(entry: StatefulKind) -> None:
    assert entry.source.startswith("https://"), entry.source
    assert not re.search(r"\s", entry.source), entry.source
    texts = [entry.operator, entry.claims, *([entry.protection] if entry.protection else [])]
    for text in texts:
        assert text and text == text.strip() and "\n" not in text, text
    assert entry.protection is None or entry.protection.strip()


@pytest.mark.parametrize("entry", CATALOGUE, ids=_ids)
def test_catalogued_finds_each_entry(entry: StatefulKind) -> None:
    assert catalogued(entry.group, entry.kind) is entry


def test_catalogued_is_none_for_kinds_it_does_not_list() -> None:
    assert catalogued("postgresql.cnpg.io", "Backup") is None
    assert catalogued("postgresql.cnpg.io", "cluster") is None  # kinds are case-sensitive
    assert catalogued("", "PersistentVolumeClaim") is None
    assert catalogued("example.com", "Widget") is None


def test_the_postgres_operators_are_there() -> None:
    cnpg = catalogued("postgresql.cnpg.io", "Cluster")
    assert cnpg is not None and cnpg.plural == "clusters" and cnpg.operator == "CloudNativePG"
    assert "ownerReference" in cnpg.claims
    assert cnpg.name == "Cluster.postgresql.cnpg.io"
    crunchy = catalogued("postgres-operator.crunchydata.com", "PostgresCluster")
    assert crunchy is not None and crunchy.plural == "postgresclusters"
    zalando = catalogued("acid.zalan.do", "postgresql")
    assert zalando is not None and zalando.plural == "postgresqls"
    assert zalando.protection is not None and "delete_annotation" in zalando.protection


def test_the_widely_used_operators_are_all_there() -> None:
    wanted = {
        ("postgresql.cnpg.io", "Cluster"),
        ("postgres-operator.crunchydata.com", "PostgresCluster"),
        ("acid.zalan.do", "postgresql"),
        ("mysql.oracle.com", "InnoDBCluster"),
        ("k8s.mariadb.com", "MariaDB"),
        ("pxc.percona.com", "PerconaXtraDBCluster"),
        ("psmdb.percona.com", "PerconaServerMongoDB"),
        ("pgv2.percona.com", "PerconaPGCluster"),
        ("mongodbcommunity.mongodb.com", "MongoDBCommunity"),
        ("redis.redis.opstreelabs.in", "Redis"),
        ("redis.redis.opstreelabs.in", "RedisCluster"),
        ("redis.redis.opstreelabs.in", "RedisReplication"),
        ("dragonflydb.io", "Dragonfly"),
        ("rabbitmq.com", "RabbitmqCluster"),
        ("kafka.strimzi.io", "Kafka"),
        ("kafka.strimzi.io", "KafkaNodePool"),
        ("elasticsearch.k8s.elastic.co", "Elasticsearch"),
        ("clickhouse.altinity.com", "ClickHouseInstallation"),
        ("longhorn.io", "Volume"),
        ("ceph.rook.io", "CephCluster"),
    }
    missing = {key for key in wanted if catalogued(*key) is None}
    assert not missing, sorted(missing)


def test_a_few_settings_that_decide_the_claims_fate_are_named() -> None:
    def claims(group: str, kind: str) -> str:
        entry = catalogued(group, kind)
        assert entry is not None
        return entry.claims

    assert "deleteClaim" in claims("kafka.strimzi.io", "KafkaNodePool")
    assert "volumeClaimDeletePolicy" in claims("elasticsearch.k8s.elastic.co", "Elasticsearch")
    assert "percona.com/delete-pxc-pvc" in claims("pxc.percona.com", "PerconaXtraDBCluster")
    assert "yes-really-destroy-data" in claims("ceph.rook.io", "CephCluster")
    assert "keepAfterDelete" in claims("redis.redis.opstreelabs.in", "RedisCluster")


def test_a_stateful_kind_is_immutable() -> None:
    entry = CATALOGUE[0]
    with pytest.raises(AttributeError):
        entry.plural = "other"  # type: ignore[misc]
