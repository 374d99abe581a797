"""`gate completion bash|zsh|fish`: each script is printed, and each completes gate's real
commands and options when a shell runs it.

bash runs its script for real (bash is on every machine this suite runs on). zsh and fish run
theirs where they are installed; where one is absent, its script's content is checked and the
answer it would ask gate for is asked of gate directly (the same `_GATE_COMPLETE` protocol), so
no test is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def gate_script(folder: Path) -> Path:
    """A `gate` on PATH that runs this checkout's gate as the console script does (its name, and
    so its completion variable, is `gate`)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "gate"
    script.write_text(f"#!{sys.executable}\nfrom gate.cli import run\n\nrun()\n")
    script.chmod(0o755)
    return script


def env_with(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "_GATE_"))}
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_gate(folder: Path, *args: str, env_extra: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(gate_script(folder)), *args],
        capture_output=True,
        text=True,
        env={**env_with(folder), **(env_extra or {})},
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def completion_script(folder: Path, shell: str) -> str:
    return run_gate(folder, "completion", shell)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_its_script_bound_to_gate(tmp_path: Path, shell: str) -> None:
    script = completion_script(tmp_path / "bin", shell)
    assert f"_GATE_COMPLETE={shell}_complete" in script
    binds = {
        "bash": "complete -o nosort -F _gate_completion gate",
        "zsh": "compdef _gate_completion gate",
        "fish": "complete --no-files --command gate",
    }
    assert binds[shell] in script


def test_an_unknown_shell_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(gate_script(tmp_path / "bin")), "completion", "powershell"],
        capture_output=True,
        text=True,
        env=env_with(tmp_path / "bin"),
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert "'powershell' is not one of 'bash', 'zsh', 'fish'" in done.stderr


def test_the_help_says_how_to_install_it(tmp_path: Path) -> None:
    out = run_gate(tmp_path / "bin", "completion", "--help")
    assert "source <(gate completion bash)" in out
    assert "gate completion fish | source" in out
    assert "~/.config/fish/completions/gate.fish" in out


def bash_complete(folder: Path, words: list[str]) -> list[str]:
    """What a real bash offers for `words` (the last one being completed), with the script
    `gate completion bash` printed, sourced the kubectl way: `source <(gate completion bash)`."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        "source <(gate completion bash)\n"
        f"COMP_WORDS=({line})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        'COMP_LINE="${COMP_WORDS[*]}"\n'
        "COMP_POINT=${#COMP_LINE}\n"
        # Which function `complete` bound to gate: the one the script registered.
        "fn=$(complete -p gate | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\n"
        '"$fn" gate\n'
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    gate_script(folder)
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        env=env_with(folder),
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_a_command(tmp_path: Path) -> None:
    assert bash_complete(tmp_path / "bin", ["gate", "ch"]) == ["check"]
    assert "completion" in bash_complete(tmp_path / "bin", ["gate", "co"])


def test_bash_completes_an_option_of_a_lazily_loaded_command(tmp_path: Path) -> None:
    offered = bash_complete(tmp_path / "bin", ["gate", "check", "--fo"])
    assert "--format" in offered
    assert all(o.startswith("--fo") for o in offered)
    assert bash_complete(tmp_path / "bin", ["gate", "check", "--form"]) == ["--format"]


def test_bash_completes_a_choice(tmp_path: Path) -> None:
    assert bash_complete(tmp_path / "bin", ["gate", "completion", "z"]) == ["zsh"]


def protocol_answer(folder: Path, shell: str, words: list[str]) -> str:
    """What the script asks gate for `words` in `shell`, asked directly: how each script talks
    to gate (COMP_WORDS, COMP_CWORD and `_GATE_COMPLETE=<shell>_complete`)."""
    cword = str(len(words) - 1) if shell != "fish" else words[-1]
    return run_gate(
        folder,
        env_extra={
            "_GATE_COMPLETE": f"{shell}_complete",
            "COMP_WORDS": " ".join(words),
            "COMP_CWORD": cword,
        },
    )


def test_zsh_completes_a_command_and_an_option(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    if shutil.which("zsh") is None:
        script = completion_script(folder, "zsh")
        assert script.startswith("#compdef gate\n")
        assert "COMP_CWORD=$((CURRENT-1)) _GATE_COMPLETE=zsh_complete gate" in script
        # zsh's answer is type, value, description, a line each.
        lines = protocol_answer(folder, "zsh", ["gate", "ch"]).splitlines()
        assert lines[:2] == ["plain", "check"]
        lines = protocol_answer(folder, "zsh", ["gate", "check", "--form"]).splitlines()
        assert lines[:2] == ["plain", "--format"]
        return
    gate_script(folder)
    program = (
        "autoload -U compinit && compinit -u\n"
        "source <(gate completion zsh)\n"
        # Drive a completion as zsh would: compadd/_describe record what they are given.
        "compadd() { local -a a; a=(${(P)${@[-1]}}); reply+=($a) }\n"
        "_describe() { local -a a; a=(${(P)${@[-2]}}); reply+=(${a%%:*}) }\n"
        "typeset -a reply words; words=(gate ch); CURRENT=2; _gate_completion\n"
        "print -l -- $reply; print -- '=='; reply=()\n"
        "words=(gate check --form); CURRENT=3; _gate_completion\n"
        "print -l -- $reply\n"
    )
    done = subprocess.run(
        ["zsh", "-f", "-c", program],
        capture_output=True,
        text=True,
        env=env_with(folder),
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    commands, options = done.stdout.split("==\n")
    assert commands.split() == ["check"]
    assert options.split() == ["--format"]


def test_fish_completes_a_command_and_an_option(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    if shutil.which("fish") is None:
        script = completion_script(folder, "fish")
        assert "_GATE_COMPLETE=fish_complete COMP_WORDS=(commandline -cp)" in script
        first = protocol_answer(folder, "fish", ["gate", "ch"]).splitlines()[0]
        assert first.split("\t")[0] == "plain,check"
        answer = protocol_answer(folder, "fish", ["gate", "check", "--form"])
        assert answer.splitlines()[0].split("\t")[0] == "plain,--format"
        return
    gate_script(folder)
    program = (
        "gate completion fish | source\n"
        "complete --do-complete 'gate ch'\n"
        "echo ==\n"
        "complete --do-complete 'gate check --form'\n"
    )
    done = subprocess.run(
        ["fish", "--no-config", "-c", program],
        capture_output=True,
        text=True,
        env=env_with(folder),
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    commands, options = (
        [line.split("\t")[0] for line in part.splitlines()] for part in done.stdout.split("==\n")
    )
    assert commands == ["check"]
    assert options == ["--format"]
