"""The code a stage depends on: the files of ``components/`` its function imports, followed
transitively, plus the method's declaration. Read with ``ast`` (nothing is imported, so
planning never pays for torch); imports inside functions count too, since stages import
heavy modules lazily. Editing one common module then stales only the stages that use it."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import flows

CODE_ROOT = Path(flows.__file__).resolve().parents[1]
PACKAGE = "components"


def module_file(module: str, root: Path = CODE_ROOT) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: Path, module: str) -> set[str]:
    """Module names that ``path`` (the source of ``module``) imports, as written or resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import mod`
    return found


@lru_cache(maxsize=None)
def component_files(module: str, root: Path = CODE_ROOT) -> tuple[str, ...]:
    """Files under ``components/`` (relative to ``root``) that importing ``module`` runs,
    including the ``__init__.py`` of every package on the way."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        if parts[0] != PACKAGE:
            continue
        for i in range(1, len(parts) + 1):   # parent packages are imported first
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            path = module_file(prefix, root)
            if path is None:
                continue  # `from pkg import name` where name is not a module
            seen.add(prefix)
            todo.extend(_imported_modules(path, prefix))
    files = {module_file(name, root) for name in seen}
    return tuple(sorted(str(p.relative_to(root)) for p in files if p is not None))


def package_data_files(folder: str, root: Path = CODE_ROOT) -> tuple[str, ...]:
    """Files of a package folder that are neither Python nor Markdown (e.g. bundled data)."""
    base = root / folder
    if not base.is_dir():
        return ()
    return tuple(sorted(str(p.relative_to(root)) for p in base.rglob("*")
                        if p.is_file() and p.suffix not in (".py", ".pyc", ".md")
                        and "__pycache__" not in p.parts))
