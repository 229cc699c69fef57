"""The driver's one connection to DVC: what is stale, restore from the run-cache, record.

Only the driver process calls DVC (it takes a repo lock; concurrent callers fail). One
``Repo`` stays open for the whole run, and every call is made from the driver thread.
``Repo.commit(force=True)`` and ``stage_cache.restore`` are internal DVC APIs, which is why
dvc is pinned and an end-to-end test checks the result against the DVC CLI.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Staleness:
    addr: str
    reasons: tuple[str, ...]   # empty when up to date

    @property
    def up_to_date(self) -> bool:
        return not self.reasons


def stage_addr(project_root: Path, method: str, stage: str, item_key: str | None = None) -> str:
    # absolute: DVC resolves relative targets against the process's cwd, not the repo
    name = f"{stage}@{item_key}" if item_key else stage
    return f"{project_root / 'data' / method / 'dvc.yaml'}:{name}"


class DvcBridge:
    def __init__(self, root: Path):
        from dvc.repo import Repo

        self.root = root
        # DVC resolves some paths against the process's cwd: work from the project root
        self._previous_cwd = os.getcwd()
        os.chdir(root)
        self.repo = Repo(str(root), _wait_for_lock=True)

    def close(self) -> None:
        self.repo.close()
        os.chdir(self._previous_cwd)

    def _stage(self, addr: str):
        (stage,) = self.repo.stage.collect(addr)
        return stage

    def status(self, addr: str) -> Staleness:
        self.repo._reset()
        found = self.repo.status(targets=[addr])
        reasons = []
        for entries in found.values():  # one target -> at most one stage
            for entry in entries:
                reasons.extend(_explain(entry))
        if found and not reasons:
            reasons = [str(found)]
        return Staleness(addr, tuple(reasons))

    def pipeline_status(self, pipeline_file: Path) -> dict[str, Staleness]:
        """Every stale instance of one pipeline file, keyed by its name (``stage`` or
        ``stage@item``), from one ``Repo.status`` call: DVC parses the file and its lock once,
        where one call per instance parses them again each time."""
        self.repo._reset()
        found = self.repo.status(targets=[str(pipeline_file)])
        out = {}
        for addr, entries in found.items():
            name = addr.rpartition(":")[2]
            reasons = [r for entry in entries for r in _explain(entry)]
            out[name] = Staleness(addr, tuple(reasons or [str(entries)]))
        return out

    def restore_from_run_cache(self, addr: str, dry_run: bool = False) -> bool:
        """If DVC's run-cache has this stage with the current deps and params, check its
        outputs out and record it; returns True when nothing has to run. ``dry_run``: only
        say whether it could (nothing is checked out or recorded)."""
        from dvc.repo import lock_repo
        from dvc.stage.cache import RunCacheNotFoundError

        with lock_repo(self.repo):
            stage = self._stage(addr)
            if dry_run:
                return self._in_run_cache(stage)
            try:
                self.repo.stage_cache.restore(stage)
            except RunCacheNotFoundError:
                return False
        self.commit(addr)
        return True

    def _in_run_cache(self, stage) -> bool:
        """What ``stage_cache.restore`` would find, without checking anything out. (Its own
        ``dry`` mode keys the run-cache by the hashes in dvc.lock, not today's.)"""
        from dvc.stage.cache import _can_hash

        if not _can_hash(stage):
            return False
        if (not stage.changed_stage() and stage.deps_cached()
                and all(bool(out.hash_info) for out in stage.outs)):
            return stage.outs_cached()     # the lock's own outputs
        stage.save_deps()                  # in memory: today's hashes make the run-cache key
        entry = self.repo.stage_cache._load(stage)
        if not entry:
            return False
        return self.repo.stage_cache._create_stage(entry, wdir=stage.wdir).outs_cached()

    def commit(self, addr: str) -> dict[str, Any]:
        """Record a finished stage: dvc.lock entry, outputs into the cache, run-cache entry.
        Returns the hashes needed for lineage (deps/outs md5, run-cache key)."""
        from dvc.stage.cache import _get_stage_hash

        self.repo._reset()
        (stage,) = self.repo.commit(addr, force=True)
        self.repo.stage_cache.save(stage)
        return {
            "stage_hash": _get_stage_hash(stage),
            # file/dir deps only: params deps carry their values, not a hash
            "deps": {str(d): d.hash_info.value for d in stage.deps
                     if d.hash_info and isinstance(d.hash_info.value, str)},
            "outs": {str(o): o.hash_info.value for o in stage.outs if o.hash_info},
        }


REMOTE_NAME = "repro"


def configure_remote(bridge: "DvcBridge", url: str) -> None:
    """Register ``url`` as the default DVC remote ``repro`` in ``.dvc/config.local`` (never
    committed). Only the URL is written: credentials and endpoint come from the environment
    (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...), which dvc-s3 reads itself."""
    repo = bridge.repo
    current = repo.config.get("remote", {}).get(REMOTE_NAME, {}).get("url")
    if current == url and repo.config.get("core", {}).get("remote") == REMOTE_NAME:
        return
    with repo.config.edit("local") as conf:
        conf.setdefault("remote", {}).setdefault(REMOTE_NAME, {})["url"] = url
        conf.setdefault("core", {})["remote"] = REMOTE_NAME
    repo._reset()


def push(bridge: "DvcBridge", pipeline_file: Path) -> int:
    """``dvc push --run-cache`` of one method's pipeline: its outputs and every run-cache
    entry, so another clone can ``dvc pull`` (or restore from the run-cache) instead of running."""
    from dvc.repo import lock_repo

    bridge.repo._reset()
    with lock_repo(bridge.repo):
        return bridge.repo.push(targets=[str(pipeline_file)], remote=REMOTE_NAME, run_cache=True)


def _explain(entry: Any) -> list[str]:
    """Turn one entry of ``Repo.status`` into readable reasons (params / code / data / outs)."""
    if isinstance(entry, str):
        return [entry]
    reasons = []
    for kind, changes in entry.items():
        if kind == "changed deps":
            for path, change in changes.items():
                if isinstance(change, dict):  # a params file: {key: "modified"}
                    reasons += [f"params: {k} {v}" for k, v in change.items()]
                elif "components/" in path or "flows/" in path:
                    reasons.append(f"code: {path} {change}")
                else:
                    reasons.append(f"deps: {path} {change}")
        elif kind == "changed outs":
            reasons += [f"outs: {path} {change}" for path, change in changes.items()]
        else:
            reasons.append(f"{kind}: {changes}")
    return reasons
