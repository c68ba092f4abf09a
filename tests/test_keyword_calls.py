"""Calls with more than a few arguments are keyword calls (issue #39): a reader sees which value
is which without opening the signature, and two values of one type cannot swap unseen. As
mlx-lm does, a function or method that takes many values makes all but its first few
keyword-only, and a dataclass of many fields is built by field names (``kw_only=True``: its
field order, and so ``asdict`` and every file written from it, is unchanged). Checked on the
source of ``dspark`` and the app with ``ast``; each rule is shown to fail on a planted snippet."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"dspark": ROOT / "dspark", "app": ROOT / "app"}
MAX_POSITIONAL = 4  # arguments a call may pass by position, and parameters a long signature may take so
MAX_PARAMETERS = 5  # a signature or a dataclass with more than this is read by names
MAX_FIELDS = 5

#: Signatures an outside library decides, as "file:function" (a method as "file:Class.method").
SIGNATURE_EXCEPTIONS: dict[str, str] = {
    "dspark/training/trainer.py:DrafterTrainer._loss": "nn.value_and_grad and mx.compile call it with the batch's "
    "arrays by position",
    "dspark/training/stepwise.py:StepwiseTrainer._loss": "the same: nn.value_and_grad and mx.compile call it "
    "with the batch's arrays by position",
}
#: Calls whose callee is outside our code and takes its arguments by position only, as "file:callee".
CALL_EXCEPTIONS: dict[str, str] = {
    "dspark/backbone.py:reshape": "mlx's array.reshape takes the shape's sizes by position",
    "dspark/rounds.py:eval": "mx.eval takes the arrays it evaluates by position, as many as there are",
    "dspark/rounds.py:zip": "the builtin takes the iterables it zips by position",
    "dspark/files.py:renameat2": "the C library's renameat2, called through ctypes, takes its five arguments by "
    "position",
}
#: Dataclasses an outside library builds by position, as "file:Class".
DATACLASS_EXCEPTIONS: dict[str, str] = {}


def sources() -> dict[str, ast.Module]:
    return {
        f"{pkg}/{p.relative_to(folder)}": ast.parse(p.read_text(), str(p))
        for pkg, folder in FOLDERS.items()
        for p in sorted(folder.rglob("*.py"))
    }


def callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ast.unparse(f)


def positional_calls(name: str, tree: ast.Module) -> list[str]:
    """Calls that pass more than ``MAX_POSITIONAL`` arguments by position (a ``*args`` aside)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            n = sum(not isinstance(a, ast.Starred) for a in node.args)
            if n > MAX_POSITIONAL and f"{name}:{callee(node)}" not in CALL_EXCEPTIONS:
                out.append(f"{name}:{node.lineno} {callee(node)}(...) {n} positional")
    return out


def functions(tree: ast.Module):
    """Every function and method as (qualified name, node, whether it is a method)."""

    def walk(node, prefix, in_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child, in_class
                yield from walk(child, f"{prefix}{child.name}.", False)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.", True)
            else:
                yield from walk(child, prefix, in_class)

    yield from walk(tree, "", False)


def long_signatures(name: str, tree: ast.Module) -> list[str]:
    """Functions of more than ``MAX_PARAMETERS`` parameters (``self``/``cls``, ``*args`` and
    ``**kwargs`` not counted) that take more than ``MAX_POSITIONAL`` of them by position."""
    out = []
    for qual, fn, method in functions(tree):
        positional = fn.args.posonlyargs + fn.args.args
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
        if method and not static and positional and positional[0].arg in ("self", "cls", "mcs"):
            positional = positional[1:]
        total = len(positional) + len(fn.args.kwonlyargs)
        if total > MAX_PARAMETERS and len(positional) > MAX_POSITIONAL and f"{name}:{qual}" not in SIGNATURE_EXCEPTIONS:
            out.append(f"{name}:{fn.lineno} {qual}: {len(positional)} of {total} parameters positional")
    return out


def is_dataclass_decorator(d: ast.expr) -> bool:
    target = d.func if isinstance(d, ast.Call) else d
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass"
    )


def kw_only(d: ast.expr) -> bool:
    return isinstance(d, ast.Call) and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in d.keywords
    )


def wide_dataclasses(name: str, tree: ast.Module) -> list[str]:
    """Dataclasses of more than ``MAX_FIELDS`` fields of their own that are not ``kw_only=True``."""
    out = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        deco = next((d for d in cls.decorator_list if is_dataclass_decorator(d)), None)
        if deco is None or kw_only(deco) or f"{name}:{cls.name}" in DATACLASS_EXCEPTIONS:
            continue
        fields = [
            s
            for s in cls.body
            if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name)
            and "ClassVar" not in ast.unparse(s.annotation)
        ]
        if len(fields) > MAX_FIELDS:
            out.append(f"{name}:{cls.lineno} {cls.name}: {len(fields)} fields, not kw_only")
    return out


RULES = {"calls": positional_calls, "signatures": long_signatures, "dataclasses": wide_dataclasses}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_code_follows_the_rule(rule):
    found = [v for name, tree in sources().items() for v in RULES[rule](name, tree)]
    assert not found, "\n".join(found)


PLANTED = {
    "calls": ("f(a, b, c, d, e)\n", "f(a, b, c, d, e=e)\nf(a, *rest)\nf(a, b, c, d, *more)\n"),
    "signatures": (
        "def f(a, b, c, d, e, g=1): ...\n",
        "def f(a, b, c, d, *, e, g=1): ...\n"
        "class C:\n    def m(self, a, b, c, d, *, e, g): ...\n"
        "def h(a, b, c, d, e, *args, **kwargs): ...\n",
    ),
    "dataclasses": (
        "@dataclass\nclass D:\n    a: int\n    b: int\n    c: int\n    d: int\n    e: int\n    f: int\n",
        "@dataclass(kw_only=True)\nclass D:\n    a: int\n    b: int\n    c: int\n    d: int\n    e: int\n"
        "    f: int\n@dataclass(frozen=True)\nclass E:\n    a: int\n    b: int\n    c: int\n    d: int\n"
        "    e: int\n    k: ClassVar[int] = 1\n",
    ),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_can_fail(rule):
    bad, good = PLANTED[rule]
    assert len(RULES[rule]("planted.py", ast.parse(bad))) == 1
    assert RULES[rule]("planted.py", ast.parse(good)) == []


def test_every_exception_names_something_that_is_there():
    """An exception outlives what it excused unless it is checked: each names a function, a call
    or a dataclass still in the source, and says why."""
    trees = sources()
    names = {f"{n}:{q}" for n, t in trees.items() for q, _, _ in functions(t)}
    names |= {f"{n}:{callee(c)}" for n, t in trees.items() for c in ast.walk(t) if isinstance(c, ast.Call)}
    names |= {f"{n}:{c.name}" for n, t in trees.items() for c in ast.walk(t) if isinstance(c, ast.ClassDef)}
    listed = {**SIGNATURE_EXCEPTIONS, **CALL_EXCEPTIONS, **DATACLASS_EXCEPTIONS}
    assert not {k for k in listed if k not in names}
    assert all(reason.strip() for reason in listed.values())
