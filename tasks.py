"""invoke tasks: one per ``cuw`` verb, with the same arguments, made from the CLI's own grammar
(:func:`cuw.cli.parser.verb_specs`), so a verb or option exists here exactly when ``cuw`` has it.

``invoke shard example 2/4``, ``invoke link spconv``, ``invoke plan natten --shards 23``: a
value option takes its value as text (the ``cuw`` CLI checks it and says what is wrong in one
line); an option ``cuw`` takes several times is given several times here too, each value passed on
as it is.
"""

import inspect
import keyword
import shlex
import sys

from invoke import Collection, Context, Exit, Task
from invoke.parser import ParseError
from invoke.program import Program

from cuw.cli.front import run_verb

from cuw.cli.parser import VerbSpec, verb_specs


def _parse_tasks_or_exit_2(self) -> None:
    """invoke exits 1 on a flag or value its parser refuses, where every front end promises 2 for bad
    input (docs/verbs.md): the same one line, exit 2."""
    try:
        _parse_tasks(self)
    except ParseError as exc:
        task = f"{exc.context.name}: " if getattr(exc, "context", None) is not None and exc.context.name else ""
        print(f"invoke: error: {task}{exc}; `invoke --help {task.rstrip(': ') or '<task>'}` lists its options", file=sys.stderr)
        raise SystemExit(2) from None


_parse_tasks = Program.parse_tasks
Program.parse_tasks = _parse_tasks_or_exit_2  # type: ignore[method-assign]


def _param(option) -> str:
    name = option.dest if option.positional else option.flag.lstrip("-").replace("-", "_")
    return option.dest if keyword.iskeyword(name) else name


def _argv(verb: VerbSpec, values: dict) -> list[str]:
    argv = [verb.name]
    for option in verb.options:
        value = values[_param(option)]
        if option.positional:
            argv += [value] if value != "" else []
        elif option.switch:
            argv += [option.flag] if value else []
        elif option.repeat:
            # Each value as given, empty ones too: cuw refuses what it would refuse, and splits the
            # comma lists it takes (a path or a URL may hold a comma).
            given = value if isinstance(value, list) else [] if value is None else [value]
            argv += [a for item in given for a in (option.flag, str(item))]
        elif value != "":
            argv += [option.flag, str(value)]
    return argv


def _task(verb: VerbSpec) -> Task:
    def body(c: Context, **values) -> None:
        # The verb's own exit code (invoke's Exit carries it); Ctrl-C and SIGTERM reach it once.
        rc = run_verb(_argv(verb, values))
        if rc != 0:
            raise Exit(code=rc)

    params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for option in verb.options:
        # A repeated option's default is None: invoke then makes it a list (``--count a --count b``).
        default = inspect.Parameter.empty if option.required else (False if option.switch else None if option.repeat else "")
        params.append(
            inspect.Parameter(
                _param(option),
                inspect.Parameter.KEYWORD_ONLY if not option.positional else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=default,
            )
        )
    # Required positionals first (a signature's order); optional ones (build's recipe) after them.
    params[1:] = sorted(params[1:], key=lambda p: (p.kind != p.POSITIONAL_OR_KEYWORD, p.default is not p.empty))
    body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    body.__name__ = verb.name.replace("-", "_")
    body.__doc__ = verb.help[:1].upper() + verb.help[1:] + "."
    positional = [_param(o) for o in verb.options if o.positional]
    repeated = [_param(o) for o in verb.options if o.repeat]
    return Task(body, name=verb.name, positional=positional, iterable=repeated, help={_param(o): o.help for o in verb.options})


def _tests(c: Context) -> None:
    """Run the test suite (real nvcc, real ccache)."""
    c.run(shlex.join([sys.executable, "-m", "pytest", "-q"]))


def _lint(c: Context) -> None:
    """ruff, mypy, shellcheck and codespell, as CI runs them (the nox session)."""
    c.run(shlex.join([sys.executable, "-m", "nox", "-s", "lint"]))


ns = Collection(*(_task(verb) for verb in verb_specs()), Task(_tests, name="tests"), Task(_lint, name="lint"))
