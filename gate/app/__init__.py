"""The application layer: what a `gate` command does, between its click door and the engine.

`gate.cli` parses options and prints; `gate.app` reads the revisions and the policy (through
`gate.sources` and `gate.kube`), runs the engine's pure decisions and hands back what the door
prints. One reader per way of reading a revision (`sides`), one policy at a revision (`policy`),
one check (`check`): every door that reads a revision (check, history, doctor, retire, fence)
goes through them, so a new door is an adapter, not a copy of a click function.
"""
