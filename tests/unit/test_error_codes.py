"""ErrorCode is the one home of the codes: every code written in app/ is a member, the README's
table is its output, and the errors take their status from it."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from app.errors import (
    CitegateError,
    Conflict,
    ErrorCode,
    NotFound,
    PayloadTooLarge,
    readme_table,
)
from app.upstream.errors import UpstreamError, error_for_status

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
# The local engine speaks the Messages API's error shapes, not ours.
NOT_OURS = APP / "local_engine"
CODE = re.compile(r"^[a-z][a-z0-9_]*$")


def app_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(APP.rglob("*.py")):
        if NOT_OURS in path.parents:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _resolve(node: ast.expr, module: ModuleType) -> object | None:
    """What a callee names in the module, for plain and dotted names; None otherwise."""
    if isinstance(node, ast.Name):
        return getattr(module, node.id, None)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, module)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _code_argument(call: ast.Call, module: ModuleType | None) -> ast.expr | None:
    """The expression given as ``code`` to a callee of app/ (or one that cannot be resolved,
    such as a method): by keyword, or by position when the callee has a parameter of that name.
    Other libraries' codes (``typer.Exit(code=1)``) are theirs."""
    callee = None if module is None else _resolve(call.func, module)
    if callee is not None and not str(getattr(callee, "__module__", "")).startswith("app."):
        return None
    for keyword in call.keywords:
        if keyword.arg == "code":
            return keyword.value
    if callee is None or not callable(callee):
        return None
    try:
        parameters = list(inspect.signature(callee).parameters)
    except (TypeError, ValueError):
        return None
    if "code" not in parameters:
        return None
    position = parameters.index("code")
    if position < len(call.args) and not any(
        isinstance(arg, ast.Starred) for arg in call.args[: position + 1]
    ):
        return call.args[position]
    return None


def _problem(expression: ast.expr) -> str | None:
    """Why this ``code`` expression may name a code outside ErrorCode; None when it cannot."""
    if isinstance(expression, ast.Constant):
        if expression.value is None:
            return None
        if isinstance(expression.value, str) and expression.value in set(ErrorCode):
            return None
        return f"{expression.value!r} is not an ErrorCode"
    if isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name):
        if expression.value.id == "ErrorCode":
            if expression.attr in ErrorCode.__members__:
                return None
            return f"ErrorCode.{expression.attr} does not exist"
        return None  # another object's code, passed through: ErrorCode.of checks it
    lookup = (
        isinstance(expression, ast.Call)
        and isinstance(expression.func, ast.Attribute)
        and expression.func.attr == "get"
    )
    if lookup or isinstance(expression, ast.Name | ast.Subscript):
        return None  # a variable or a lookup: its values are checked where they are written
    if isinstance(expression, ast.IfExp):
        return _problem(expression.body) or _problem(expression.orelse)
    return f"a code built at run time ({ast.unparse(expression)}) cannot be checked"


def unlisted_codes(source: str, module: ModuleType | None = None) -> list[str]:
    """Each place in the source that gives a code which is not, or may not be, an ErrorCode."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            argument = _code_argument(node, module)
            if argument is not None and (why := _problem(argument)):
                found.append(f"line {node.lineno}: {why}")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = {t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in targets}
            # Only a literal or a member: a pydantic field named `code` is not a code.
            value = node.value
            if (
                named & {"code", "default_code"}
                and isinstance(value, ast.Constant | ast.Attribute)
                and (why := _problem(value))
            ):
                found.append(f"line {node.lineno}: {why}")
    return sorted(found, key=lambda line: int(line.split(":")[0].removeprefix("line ")))


@pytest.mark.parametrize("name, path", list(app_modules()), ids=lambda value: str(value))
def test_every_code_written_in_app_is_an_error_code(name: str, path: Path) -> None:
    module = importlib.import_module(name)
    found = unlisted_codes(path.read_text(encoding="utf-8"), module)
    where = path.relative_to(ROOT)
    assert not found, f"{where}: add the code to ErrorCode in app/errors.py: {found}"


def test_the_walk_finds_codes_that_skip_the_enumeration() -> None:
    import app.documents.pdf as pdf

    source = """
from app.errors import ErrorCode, NotFound
raise NotFound("x", code="widget_not_found")
raise NotFound("x", code=f"{what}_not_found")
raise NotFound("x", code=ErrorCode.WIDGET_NOT_FOUND)
raise PdfError("pdf_melted", "It melted.")
code = "teapot"
raise NotFound("x", code="document_not_found")
raise NotFound("x", code=ErrorCode.DOCUMENT_NOT_FOUND)
raise PdfError("pdf_encrypted", "The PDF is encrypted.")
raise NotFound("x", code=exc.code)
"""
    found = unlisted_codes(source, pdf)
    assert [line.split(":")[0] for line in found] == [
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "line 7",
    ], found


def test_codes_are_unique_snake_case_with_a_title_and_a_description() -> None:
    values = [str(code) for code in ErrorCode]
    assert len(values) == len(set(values))
    for code in ErrorCode:
        assert CODE.match(code), code
        assert code.name == code.upper()
        assert 400 <= code.status < 600, code
        assert code.problem_title, code
        assert code.when and not code.when.endswith("."), code
    # Members compare and hash as their strings: `body["code"] == "not_found"` keeps working.
    by_code: dict[str, int] = {ErrorCode.NOT_FOUND: 1}
    assert by_code["not_found"] == 1
    assert ErrorCode.of("not_found") is ErrorCode.NOT_FOUND


def _readme_rows() -> dict[str, int]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("| code | status | when |")
    rows: dict[str, int] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for code in re.findall(r"`([a-z0-9_]+)`", cells[0]):
            rows[code] = int(cells[1])
    return rows


def test_the_readme_table_is_the_enumeration() -> None:
    rows = _readme_rows()
    expected = {str(code): code.status for code in ErrorCode}
    missing = sorted(set(expected) - set(rows))
    unknown = sorted(set(rows) - set(expected))
    wrong = sorted(code for code in set(rows) & set(expected) if rows[code] != expected[code])
    assert not (missing or unknown or wrong), (
        f"README.md's error table: missing {missing}, not codes {unknown}, wrong status {wrong}"
    )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_table() in readme, "paste the output of `python -m app.errors` into README.md"


def test_an_error_takes_its_status_from_its_code() -> None:
    error = UpstreamError("slow", code=ErrorCode.UPSTREAM_TIMEOUT)
    assert (error.status, error.code) == (504, "upstream_timeout")
    assert UpstreamError("down").code is ErrorCode.UPSTREAM_UNAVAILABLE
    assert PayloadTooLarge("big").status == 413
    internal = CitegateError("broken", code=ErrorCode.INTERNAL_ERROR)
    assert internal.status == 500


@pytest.mark.parametrize(
    "upstream_status, code, status",
    [
        (429, ErrorCode.UPSTREAM_RATE_LIMITED, 503),
        (529, ErrorCode.UPSTREAM_OVERLOADED, 503),
        (401, ErrorCode.UPSTREAM_AUTH_FAILED, 502),
        (413, ErrorCode.UPSTREAM_REQUEST_TOO_LARGE, 413),
        (400, ErrorCode.UPSTREAM_REJECTED, 422),
        (500, ErrorCode.UPSTREAM_UNAVAILABLE, 502),
    ],
)
def test_upstream_statuses_map_to_codes_and_their_statuses(
    upstream_status: int, code: ErrorCode, status: int
) -> None:
    error = error_for_status(upstream_status, "m", "req_1", None)
    assert (error.code, error.status) == (code, status)


def test_a_code_outside_the_enumeration_or_of_another_status_is_refused() -> None:
    with pytest.raises(ValueError, match="not an ErrorCode"):
        # A code the types forbid, as an untyped caller could pass it: refused at run time too.
        NotFound("x", code="widget_not_found")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="409"):
        NotFound("x", code=ErrorCode.CONVERSATION_BUSY)
    with pytest.raises(TypeError, match="needs a code"):
        Conflict("x")


def test_a_framework_status_without_a_code_is_a_400_or_a_500() -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from starlette.exceptions import HTTPException

    from app.errors import install_error_handlers

    app = FastAPI()
    install_error_handlers(app)

    @app.get("/teapot")
    async def teapot() -> None:
        raise HTTPException(status_code=418)

    @app.get("/unavailable")
    async def unavailable() -> None:
        raise HTTPException(status_code=503)

    with TestClient(app) as client:
        refused = client.get("/teapot")
        broken = client.get("/unavailable")
    assert (refused.status_code, refused.json()["code"]) == (400, "http_error")
    assert refused.headers["content-type"] == "application/problem+json"
    assert (broken.status_code, broken.json()["code"]) == (500, "internal_error")
