"""YAML read as Kubernetes reads it, for manifests and the policy alike.

Safe (no Python objects), libyaml's parser when PyYAML has it, and a timestamp stays a string:
the API server reads `until: 2027-02-30` as a string, and PyYAML would build a date from it, or
crash on an invalid one with a traceback. So does a plain `=` (YAML 1.1's "value" type).
"""

from __future__ import annotations

import yaml

try:
    _Base: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # PyYAML built without libyaml
    _Base = yaml.SafeLoader

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
#: YAML 1.1's `=` "value" type: PyYAML resolves a plain `=` to it and then has no constructor
#: (a traceback, on a real chart's values); Kubernetes' go-yaml reads it as the string "=".
_VALUE = "tag:yaml.org,2002:value"


class KubeLoader(_Base):  # type: ignore[valid-type,misc]
    """`yaml.SafeLoader` (libyaml's when there) without the implicit timestamp and value types."""


KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_TIMESTAMP, _VALUE)]
    for first, resolvers in _Base.yaml_implicit_resolvers.items()
}


def load(text: str) -> object:
    """One YAML document, as `yaml.safe_load` would give it but for timestamps."""
    return yaml.load(text, Loader=KubeLoader)
