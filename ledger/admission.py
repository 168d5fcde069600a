"""Request-assembly middleware and the rollover admission snapshot. Pure.

The runtime's plugin registrations are an explicit input here: a
:class:`MiddlewareRegistry` holds :class:`Registration` objects, lazily
registered loaders, plugin disposal and managed-plugin mutation epochs, and a
mount provider (the sandbox a hook runs in). No I/O happens in this module.

Two kinds of registration:

``context_only``
    The context-only adapter: the hook receives the system text (and a sandbox
    mount acquired for this one call) and returns system text. It never sees a
    tool, so it cannot remove one or mutate a schema in place. Only these are
    *certified* for rollover; the sandboxed plugin-context adapter uses this
    path.
``unrestricted``
    Receives the whole request (system, tools, messages) and may change any of
    it. However benign it looks it is uncertified, and its presence blocks a
    rollover -- a blocked admission is never "repaired" by restoring a tool the
    policy denied.

:func:`capture` is the admission step: it reconciles the workspace's lazy
loaders, then freezes an ordered, immutable :class:`AdmissionSnapshot` of the
registrations that apply to the workspace (explicit workspace scopes are
honoured, so other workspaces' registrations neither apply nor block). The
snapshot serves the rollover turn's primary and fallback requests, thinking
rebuilds and in-process retries; it cannot be pickled or copied into history
or send options. Later (un)registrations only affect later captures, while
plugin disposal and mutation epochs stay live revocation checks, and every hook
execution reacquires its mount. Ordinary, non-rollover requests use
:func:`apply_live`, which filters through the live registry every time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from ledger.core.errors import LedgerError

__all__ = [
    "AdmissionRefused",
    "AdmissionSnapshot",
    "ContextHook",
    "HookContractError",
    "Kind",
    "Loader",
    "MiddlewareRegistry",
    "NotSerializable",
    "Registration",
    "RequestHook",
    "SnapshotRevoked",
    "apply_live",
    "capture",
]

Kind = Literal["context_only", "unrestricted"]
ContextHook = Callable[[str, Any], str]
RequestHook = Callable[[dict[str, Any], Any], "Mapping[str, Any] | None"]


class AdmissionRefused(LedgerError):
    """A rollover that may not proceed. Nothing was sealed.

    ``reason`` is a short code (``history_access``, ``uncertified_middleware``,
    ``revoked``, ``window_changed``, ``nothing_to_seal``, ``too_large``,
    ``unsettled``, ``suppressed``, ``rows_changed``); ``cleared`` says whether
    context-scoped state had already been cleared (it is never restored).
    """

    def __init__(self, reason: str, message: str, *, cleared: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.cleared = cleared


class SnapshotRevoked(AdmissionRefused):
    """A plugin in the snapshot was disposed or its mutation epoch moved."""

    def __init__(self, message: str, *, cleared: bool = False) -> None:
        super().__init__("revoked", message, cleared=cleared)


class NotSerializable(LedgerError, TypeError):
    """An attempt to serialize an admission snapshot (it lives in memory only)."""


class HookContractError(LedgerError):
    """A context-only hook that returned something other than system text."""


@dataclass(frozen=True)
class Registration:
    """One request-assembly registration of a plugin.

    ``workspaces`` is an explicit scope (None: every workspace). ``order``
    sorts registrations; ties keep registration order.
    """

    id: str
    plugin: str
    hook: Callable[..., Any]
    kind: Kind = "unrestricted"
    workspaces: frozenset[str] | None = None
    order: int = 0

    @classmethod
    def context_only(
        cls,
        id: str,
        plugin: str,
        hook: ContextHook,
        *,
        workspaces: Iterable[str] | None = None,
        order: int = 0,
    ) -> Registration:
        scope = None if workspaces is None else frozenset(workspaces)
        return cls(id, plugin, hook, "context_only", scope, order)

    @classmethod
    def unrestricted(
        cls,
        id: str,
        plugin: str,
        hook: RequestHook,
        *,
        workspaces: Iterable[str] | None = None,
        order: int = 0,
    ) -> Registration:
        scope = None if workspaces is None else frozenset(workspaces)
        return cls(id, plugin, hook, "unrestricted", scope, order)

    @property
    def certified(self) -> bool:
        return self.kind == "context_only"

    def applies_to(self, workspace: str) -> bool:
        return self.workspaces is None or workspace in self.workspaces


Loader = Callable[[], Iterable[Registration]]


class MiddlewareRegistry:
    """The runtime's live registry, reduced to what admission needs."""

    def __init__(self, mount: Callable[[str], Any] | None = None) -> None:
        self._regs: dict[str, tuple[int, Registration]] = {}
        self._counter = itertools.count()
        self._lazy: list[tuple[frozenset[str] | None, Loader]] = []
        self._disposed: set[str] = set()
        self._epochs: dict[str, int] = {}
        self._mount = mount

    def register(self, reg: Registration) -> None:
        self._regs[reg.id] = (next(self._counter), reg)

    @property
    def idle(self) -> bool:
        """True when nothing is registered, not even lazily: ``apply_live``
        then hands back the request's own system, tools and messages."""
        return not self._regs and not self._lazy

    def unregister(self, reg_id: str) -> None:
        self._regs.pop(reg_id, None)

    def register_lazy(self, loader: Loader, *, workspaces: Iterable[str] | None = None) -> None:
        """A loader whose registrations appear when a matching workspace is reconciled."""
        scope = None if workspaces is None else frozenset(workspaces)
        self._lazy.append((scope, loader))

    def reconcile(self, workspace: str) -> None:
        """Run (once) every pending lazy loader that applies to ``workspace``."""
        pending: list[tuple[frozenset[str] | None, Loader]] = []
        keep: list[tuple[frozenset[str] | None, Loader]] = []
        for scope, loader in self._lazy:
            (pending if scope is None or workspace in scope else keep).append((scope, loader))
        self._lazy = keep
        for _, loader in pending:
            for reg in loader():
                self.register(reg)

    def applicable(self, workspace: str) -> tuple[Registration, ...]:
        """Registrations that apply to ``workspace``, ordered, disposed plugins skipped."""
        regs = [
            (reg.order, seq, reg)
            for seq, reg in self._regs.values()
            if reg.applies_to(workspace) and reg.plugin not in self._disposed
        ]
        return tuple(reg for _, _, reg in sorted(regs, key=lambda t: (t[0], t[1])))

    def dispose(self, plugin: str) -> None:
        self._disposed.add(plugin)

    def is_disposed(self, plugin: str) -> bool:
        return plugin in self._disposed

    def bump_epoch(self, plugin: str) -> None:
        """A managed plugin was mutated (reinstalled, reconfigured)."""
        self._epochs[plugin] = self._epochs.get(plugin, 0) + 1

    def epoch(self, plugin: str) -> int:
        return self._epochs.get(plugin, 0)

    def mount(self, plugin: str) -> Any:
        """The sandbox mount for one hook execution, acquired fresh each time."""
        return None if self._mount is None else self._mount(plugin)


def _run_context_hook(reg: Registration, system: str, registry: MiddlewareRegistry) -> str:
    out = reg.hook(system, registry.mount(reg.plugin))
    if not isinstance(out, str):
        raise HookContractError(
            f"context-only hook {reg.id!r} of plugin {reg.plugin!r} returned "
            f"{type(out).__name__}, not system text"
        )
    return out


class AdmissionSnapshot:
    """The ordered registrations admitted for one rollover. Immutable.

    Holds the registrations and the mutation epoch of each plugin at capture;
    the registry reference is kept only for the live revocation checks and for
    acquiring mounts.
    """

    __slots__ = ("_epochs", "_registrations", "_registry", "_workspace")
    _workspace: str
    _registrations: tuple[Registration, ...]
    _epochs: tuple[int, ...]
    _registry: MiddlewareRegistry

    def __init__(
        self,
        workspace: str,
        registrations: tuple[Registration, ...],
        registry: MiddlewareRegistry,
    ) -> None:
        object.__setattr__(self, "_workspace", workspace)
        object.__setattr__(self, "_registrations", registrations)
        object.__setattr__(self, "_epochs", tuple(registry.epoch(r.plugin) for r in registrations))
        object.__setattr__(self, "_registry", registry)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("an admission snapshot is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("an admission snapshot is immutable")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise NotSerializable(
            "an admission snapshot is never serialized (not into history, not into send options)"
        )

    def __copy__(self) -> AdmissionSnapshot:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> AdmissionSnapshot:
        return self

    def __repr__(self) -> str:
        ids = [r.id for r in self._registrations]
        return f"AdmissionSnapshot(workspace={self._workspace!r}, registrations={ids})"

    @property
    def workspace(self) -> str:
        return self._workspace

    @property
    def registrations(self) -> tuple[Registration, ...]:
        return self._registrations

    @property
    def uncertified(self) -> tuple[Registration, ...]:
        return tuple(r for r in self._registrations if not r.certified)

    @property
    def certified(self) -> bool:
        return not self.uncertified

    def revocation(self) -> str | None:
        """Why the snapshot may no longer be used (disposal, epoch), or None."""
        for reg, epoch in zip(self._registrations, self._epochs, strict=True):
            if self._registry.is_disposed(reg.plugin):
                return f"plugin {reg.plugin!r} (registration {reg.id!r}) was disposed"
            if self._registry.epoch(reg.plugin) != epoch:
                return f"plugin {reg.plugin!r} (registration {reg.id!r}) was mutated"
        return None

    def check_live(self, *, cleared: bool = False) -> None:
        reason = self.revocation()
        if reason is not None:
            raise SnapshotRevoked(
                f"workspace {self._workspace!r}: admission snapshot revoked: {reason}; "
                "admit the rollover again",
                cleared=cleared,
            )

    def certify(self) -> None:
        """Refuse when any registration is uncertified (unrestricted middleware)."""
        bad = self.uncertified
        if bad:
            names = ", ".join(f"{r.id} ({r.plugin})" for r in bad)
            raise AdmissionRefused(
                "uncertified_middleware",
                f"workspace {self._workspace!r}: rollover blocked: unrestricted request "
                f"middleware may remove or change tools: {names}; only context-only "
                "registrations are certified",
            )

    def system_text(self, base: str) -> str:
        """Run the admitted context-only hooks over ``base``, in order."""
        self.certify()
        self.check_live()
        text = base
        for reg in self._registrations:
            text = _run_context_hook(reg, text, self._registry)
        return text


def capture(registry: MiddlewareRegistry, workspace: str) -> AdmissionSnapshot:
    """Reconcile lazy hooks for ``workspace`` and freeze what applies to it."""
    registry.reconcile(workspace)
    return AdmissionSnapshot(workspace, registry.applicable(workspace), registry)


def apply_live(
    registry: MiddlewareRegistry, workspace: str, request: Mapping[str, Any]
) -> dict[str, Any]:
    """Ordinary (non-rollover) assembly: filter ``request`` through the live
    registry as it is now. ``request`` has ``system``, ``tools``, ``messages``."""
    registry.reconcile(workspace)
    out: dict[str, Any] = {
        "system": request.get("system", ""),
        "tools": list(request.get("tools", ())),
        "messages": list(request.get("messages", ())),
    }
    for reg in registry.applicable(workspace):
        if reg.certified:
            out["system"] = _run_context_hook(reg, out["system"], registry)
        else:
            changed = reg.hook(out, registry.mount(reg.plugin))
            if changed is not None:
                out = dict(changed)
    return out
