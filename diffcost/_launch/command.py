"""One launch command: the program, the arguments its framework's parser reads, the environment.

A :class:`Launch` keeps the arguments as tokens (what ``argparse`` or ``click`` receives), so
the same object prints as a shell command and is checked, token by token, against the real
parsers (``tests/test_launch_parsers.py``).  A plan the framework cannot run as predicted is
not printed as a command: ``refused`` says why.
"""

import shlex
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Launch:
    """A plan's launch command for one framework.

    Attributes:
        framework: ``"Megatron-LM"``, ``"Megatron-Bridge"``, ``"vLLM"`` or ``"TensorRT-LLM"``.
        program: the launcher and entry point, e.g. ``("torchrun", "--nnodes", "8", ...,
            "pretrain_gpt.py")`` or ``("vllm", "serve", "meta-llama/Meta-Llama-3-8B")``.
        args: the framework's arguments, one token per element (``"--tensor-model-parallel-
            size"``, ``"8"``): exactly what its parser reads.
        env: environment variables to set (value ``None``: to unset).
        notes: what the user must supply or know (placeholders, pre-quantized checkpoints),
            printed as ``#`` comments above the command.
        refused: empty, or why the framework cannot run the plan as predicted (then there is
            no command to run).
        files: extra files the command reads, ``{name: text}`` (TensorRT-LLM's YAML options).
    """

    framework: str
    program: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str | None], ...] = ()
    notes: tuple[str, ...] = ()
    refused: str = ""
    files: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def argv(self) -> list[str]:
        """The command as an argument vector (program, then arguments)."""
        return [*self.program, *self.args]

    def text(self) -> str:
        """Shell text: the notes as comments, then ``env`` settings, the program and one option
        (with its values) per continued line; a refused plan prints only why."""
        if self.refused:
            return f"# {self.framework} cannot run this plan as predicted: {self.refused}"
        lines = [f"# {n}" for n in self.notes]
        for name, body in self.files:
            lines.append(f"cat > {name} <<'EOF'\n{body.rstrip()}\nEOF")
        unset = [f"-u {k}" for k, v in self.env if v is None]
        sets = [f"{k}={shlex.quote(v)}" for k, v in self.env if v is not None]
        prefix = (["env", *unset] if unset else []) + sets
        head = " ".join([*prefix, *map(_quote, self.program)])
        lines.append(" \\\n    ".join([head, *_options(self.args)]))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The launch as JSON: framework, argv, env, notes, refusal, files and the shell text."""
        return {
            "framework": self.framework,
            "argv": self.argv(),
            "env": dict(self.env),
            "notes": list(self.notes),
            "refused": self.refused or None,
            "files": dict(self.files),
            "text": self.text(),
        }


def _quote(token: str) -> str:
    """Shell-quote a token, leaving ``$VAR`` placeholders for the shell to expand."""
    return token if token.startswith("$") and token[1:].isidentifier() else shlex.quote(token)


def _options(args: tuple[str, ...]) -> list[str]:
    """Group tokens as ``--option value...`` (or a ``KEY=VALUE`` override) for one option per
    printed line."""
    groups: list[list[str]] = []
    for token in args:
        override = "=" in token and not token.startswith(("-", "{", "'", '"'))
        if token.startswith("--") or override or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return [" ".join(map(_quote, g)) for g in groups]


def tokens(*pairs: tuple[str, Any] | str) -> list[str]:
    """Argument tokens from ``"--flag"`` strings and ``("--option", value)`` pairs."""
    out: list[str] = []
    for p in pairs:
        if isinstance(p, str):
            out.append(p)
        else:
            out += [p[0], str(p[1])]
    return out


__all__ = ["Launch", "tokens"]
