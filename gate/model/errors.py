"""The exception tree, drawn once.

Every error prune-gate raises on purpose is a `GateError`: the CLI turns it into one line on stderr
and exit code 2 ("could not decide"); the webhook turns it into a protocol answer. Anything else
is a bug and keeps its traceback.

    GateError
    ├── InputError          a manifest, file or stdin that cannot be read or parsed
    │   └── DuplicateObjectError
    ├── ConfigError         the policy file, with the key path at fault
    ├── GitError            a revision or path that is not in the repository
    ├── RenderError         kustomize / helm could not render
    └── ClusterError        the API server is unreachable, forbidden or answered nonsense
        └── UncountedError  the custom resources of a kind cannot be counted now
"""

from __future__ import annotations


class GateError(Exception):
    """Base of every error that means "could not decide" (exit code 2)."""


class InputError(GateError):
    """An input could not be read or parsed; `location` is `path:line` when known."""

    def __init__(self, message: str, location: str | None = None) -> None:
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class DuplicateObjectError(InputError):
    """The same object identity appears twice on one side of a comparison."""


class ConfigError(GateError):
    """The policy file is invalid; the message names the file and the key path."""


class GitError(GateError):
    """A git revision or path could not be read."""


class RenderError(GateError):
    """An external renderer (kustomize, helm) failed or is missing."""


class ClusterError(GateError):
    """The cluster could not be read: unreachable, forbidden, or an unexpected answer."""


class UncountedError(ClusterError):
    """A live view cannot count the custom resources of a kind (its list fails or is forbidden):
    the rule that needs the count refuses with RESOURCES_UNCOUNTED instead of guessing zero."""
