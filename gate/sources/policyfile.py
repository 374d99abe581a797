"""The policy file (`prune-gate.yaml`): read, validate, and build the `Policy`.

Validated against `gate/schemas/policy.schema.json`; an unknown key or a duration without a unit
is an error naming the file and the key path. A symlink, a special file or non-UTF-8 bytes are
errors too: a candidate must not switch its own guards off by what it puts at the policy's path.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gate.engine.context import Context
from gate.engine.policy import (
    DEFAULT_SEVERITY,
    MIN_MAX_CACHE_AGE_SECONDS,
    DisposableClaims,
    Exemption,
    HealWatch,
    Policy,
    WebhookSettings,
    duration_text,
    parse_duration,
    policy_api_version,
    webhook_kinds_for,
)
from gate.model.errors import ConfigError
from gate.model.findings import Code, Severity
from gate.model.kinds import unknown_kind
from gate.model.refs import parse_group_kind
from gate.sources import yamlread

if TYPE_CHECKING:
    import jsonschema

#: Name of the policy file looked up at the repository root.
POLICY_FILE = "prune-gate.yaml"


def _schema() -> dict[str, Any]:
    import json
    from importlib import resources  # with tempfile and shutil: only when a policy is validated

    text = resources.files("gate").joinpath("schemas/policy.schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def load_policy(path: str | Path | None) -> Policy:
    """Load and validate a policy file; `None` gives the defaults."""
    if path is None:
        return Policy()
    require_regular_file(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the policy: {exc.strerror}") from None
    return policy_from_text(decode_policy(data, str(path)), str(path))


def require_regular_file(path: str | Path) -> None:
    """Refuse a policy path that is a symlink or not a regular file (before reading it).

    A candidate that swaps `prune-gate.yaml` for a symlink (to `/dev/null`, to a file outside the
    tree) would otherwise switch its own guards off; a missing file is left to the reader.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the policy: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        target = str(Path(path).readlink())
        raise ConfigError(
            f"{path}: the policy file is a symlink (to {target!r}); a policy must be "
            "a regular file: replace the link with the file itself"
        )
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(
            f"{path}: the policy is not a regular file (a device, pipe or directory); "
            "point --config at a regular YAML file"
        )


def decode_policy(data: bytes, label: str) -> str:
    """The policy's text; a binary or non-UTF-8 file is an error naming it, not a traceback."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{label}: the policy is not UTF-8 text ({exc.reason} at byte {exc.start}); "
            "save it as UTF-8 YAML"
        ) from None
    if "\0" in text:
        raise ConfigError(f"{label}: the policy is a binary file (it holds NUL bytes), not YAML")
    return text


def policy_from_text(text: str, label: str) -> Policy:
    """Parse and validate a policy document given as text (e.g. read from a git revision)."""
    try:
        data = yamlread.load(text)  # an unquoted date is a string, as Kubernetes reads it
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise ConfigError(f"{label}:{line}: invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:  # ReaderError: characters YAML does not allow
        raise ConfigError(f"{label}: invalid YAML: {exc}") from None
    return policy_from_dict(data if data is not None else {}, label)


def policy_from_dict(data: Any, label: str = "policy") -> Policy:
    """Validate a decoded policy document and build the `Policy`."""
    import jsonschema  # about 60 ms: paid only when there is a policy to read

    policy_api_version(data, label)  # an unknown version first: its keys are not ours to judge
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ConfigError(f"{label}: {key}: {_explain(err)}")
    return _build(data, label)


def _explain(err: jsonschema.ValidationError) -> str:
    schema = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "additionalProperties":
        allowed = sorted((schema.get("properties") or {}).keys())
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        return f"unknown key {', '.join(map(repr, extra))}; known keys: {', '.join(allowed)}"
    is_duration = "duration" in str(schema.get("description", ""))
    if err.validator in ("pattern", "type") and is_duration:
        hint = f": write {err.instance}s" if isinstance(err.instance, int | float) else ""
        return f"{err.instance!r} is not a duration with units (like 30s, 5m, 1h30m){hint}"
    if err.validator == "type" and isinstance(err.instance, dt.date):
        return f'{err.instance.isoformat()} must be quoted, as a string: "{err.instance}"'
    if err.validator == "pattern" and str(schema.get("pattern", "")).startswith("^[A-Z]"):
        return (
            f"{err.instance!r} is not a kind: write Kind for the core group, Kind.group "
            "otherwise (PersistentVolumeClaim, StatefulSet.apps)"
        )
    if "propertyNames" in err.absolute_schema_path:
        return f"{err.instance!r}: unknown finding code (`gate codes` lists them)"
    if err.validator == "oneOf" and "severity" in err.absolute_schema_path:
        if isinstance(err.instance, bool):  # YAML 1.1 reads an unquoted off (or no) as false
            return f'{str(err.instance).lower()} is not a severity: quote it, as in "off"'
        return (
            f"{err.instance!r} is not a severity: use block, defer, warn or off, or a map of "
            "context (speculative, merged, preview, admission) to severity"
        )
    return str(err.message)


def _max_cache_age(wh: dict[str, Any], label: str) -> float:
    """`webhook.maxCacheAge`, at least `MIN_MAX_CACHE_AGE_SECONDS`."""
    seconds = parse_duration(wh["maxCacheAge"])
    if seconds < MIN_MAX_CACHE_AGE_SECONDS:
        raise ConfigError(
            f"{label}: webhook.maxCacheAge: {wh['maxCacheAge']!r} is below the minimum of 5m: "
            "a shorter limit makes /readyz flap on a quiet, healthy cluster (watches are renewed "
            "every minute, re-lists take time); a broken watch makes the cache unready at once "
            "anyway. Write 5m or more"
        )
    return seconds


def _check_kinds(data: dict[str, Any], label: str) -> None:
    """A guarded kind that names no kind of a built-in group is a typo that guards nothing."""
    lists = (("guardedKinds", data), ("webhook.guardedKinds", data.get("webhook") or {}))
    for key, section in lists:
        for i, name in enumerate(section.get("guardedKinds") or ()):
            problem = unknown_kind(*parse_group_kind(name))
            if problem is not None:
                raise ConfigError(f"{label}: {key}.{i}: {problem}")


def _check_cache_age_over_resync(wh: WebhookSettings, label: str) -> None:
    """`maxCacheAge` must be longer than `resync`; the JSON schema cannot compare two fields.

    The cache lists every kind once per `resync` and hears from the watches in between; a kind
    whose watch fails or stays quiet (a custom kind the webhook may not list waits one resync
    before it tries again) is heard from only by its next list, so with `maxCacheAge` no longer
    than `resync` that kind is older than the limit before the list comes, and /readyz fails.
    """
    age, resync = wh.max_cache_age_seconds, wh.resync_seconds
    if age > resync:
        return
    raise ConfigError(
        f"{label}: webhook.maxCacheAge ({duration_text(age)}) must be longer than "
        f"webhook.resync ({duration_text(resync)}): the cache re-lists every resync, and a kind "
        "heard from only by its list would be older than maxCacheAge before the next one, so "
        f"/readyz would fail on a healthy cluster. Set maxCacheAge above {duration_text(resync)} "
        f"(e.g. {duration_text(max(resync * 3, MIN_MAX_CACHE_AGE_SECONDS))}) or shorten resync"
    )


def _build(data: dict[str, Any], label: str) -> Policy:
    _check_kinds(data, label)
    base = Policy()
    severity = {c: dict(v) for c, v in DEFAULT_SEVERITY.items()}
    configured: set[Code] = set()
    for code_name, value in (data.get("severity") or {}).items():
        code = Code(code_name)
        configured.add(code)
        if isinstance(value, str):
            severity[code] = {None: Severity(value)}
        else:
            table: dict[Context | None, Severity] = {None: severity[code].get(None, Severity.BLOCK)}
            table.update({Context(k): Severity(v) for k, v in value.items()})
            severity[code] = table
    exemptions = []
    for i, ex in enumerate(data.get("exemptions") or []):
        group, kind = parse_group_kind(ex["kind"])
        try:
            expires = dt.date.fromisoformat(ex["expires"])
        except ValueError:
            raise ConfigError(
                f"{label}: exemptions.{i}.expires: not a date: {ex['expires']!r}"
            ) from None
        exemptions.append(
            Exemption(
                group,
                kind,
                ex["reason"],
                expires,
                ex.get("namespace", "*"),
                ex.get("name", "*"),
                tuple(sorted((ex.get("labels") or {}).items())),
                frozenset(Code(c) for c in ex["codes"]) if "codes" in ex else None,
            )
        )
    disposable = tuple(
        DisposableClaims(
            d["reason"],
            d.get("namespace", "*"),
            d.get("name", "*"),
            tuple(sorted((d.get("labels") or {}).items())),
        )
        for d in (data.get("heal") or {}).get("disposableClaims") or ()
    )
    heal = data.get("heal") or {}
    watch = heal.get("watch") or {}
    heal_watch = HealWatch(
        bool(watch.get("releaseDisposableClaims", False)),
        bool(watch.get("rescueVolumes", False)),
        bool(watch.get("forceDeletePodsOnDeadNodes", False)),
    )
    ann = data.get("annotations") or {}
    live = data.get("live") or {}
    mass = data.get("massPrune") or {}
    wh = data.get("webhook") or {}
    fence = wh.get("fence")
    guarded = (
        frozenset(parse_group_kind(k) for k in data["guardedKinds"])
        if "guardedKinds" in data
        else base.guarded_kinds
    )
    webhook = WebhookSettings(
        frozenset(parse_group_kind(k) for k in wh["guardedKinds"])
        if "guardedKinds" in wh
        else webhook_kinds_for(guarded),
        tuple(wh.get("deployers") or ()),
        tuple(wh.get("breakGlassGroups") or ()),
        (fence["namespace"], fence["name"]) if fence else None,
        parse_duration(wh["resync"]) if "resync" in wh else base.webhook.resync_seconds,
        _max_cache_age(wh, label) if "maxCacheAge" in wh else base.webhook.max_cache_age_seconds,
        tuple(dict.fromkeys(wh.get("protectedLabels") or ())),
    )
    _check_cache_age_over_resync(webhook, label)
    return Policy(
        guarded_kinds=guarded,
        severity=severity,
        configured=frozenset(configured),
        exemptions=tuple(exemptions),
        retire_annotation=ann.get("retire", base.retire_annotation),
        allow_delete_annotation=ann.get("allowDelete", base.allow_delete_annotation),
        live_timeout_seconds=parse_duration(live["timeout"])
        if "timeout" in live
        else base.live_timeout_seconds,
        live_page_size=live.get("pageSize", base.live_page_size),
        mass_prune_fraction=float(mass.get("fraction", base.mass_prune_fraction)),
        mass_prune_min_objects=int(mass.get("minObjects", base.mass_prune_min_objects)),
        mass_prune_empty_min_objects=int(
            mass.get("emptyMinObjects", base.mass_prune_empty_min_objects)
        ),
        disposable_claims=disposable,
        heal_trusted_managers=tuple(heal["trustedManagers"])
        if "trustedManagers" in heal
        else base.heal_trusted_managers,
        heal_watch=heal_watch,
        webhook=webhook,
    )


def policy_key_lines(text: str) -> dict[str, int]:
    """The 1-based line of each mapping key of a policy document, by dotted path
    (`webhook.fence`); keys inside lists are not followed. Empty when the text is not YAML (the
    policy's own reader says why). For a finding that names a setting's line."""
    try:
        node = yaml.compose(text, Loader=yamlread.KubeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}

    def walk(mapping: yaml.Node, prefix: str) -> None:
        if not isinstance(mapping, yaml.MappingNode):
            return
        for key, value in mapping.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                continue
            path = f"{prefix}{key.value}"
            lines.setdefault(path, key.start_mark.line + 1)
            walk(value, path + ".")

    if node is not None:
        walk(node, "")
    return lines
