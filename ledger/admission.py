"""Admission: middleware registrations and their snapshot: the public names of
:mod:`ledger.rollover.admission`, where the code and its documentation live."""

from ledger.rollover.admission import (
    AdmissionRefused,
    AdmissionSnapshot,
    ContextHook,
    HookContractError,
    Kind,
    Loader,
    MiddlewareRegistry,
    NotSerializable,
    Registration,
    RequestHook,
    SnapshotRevoked,
    apply_live,
    capture,
)

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
