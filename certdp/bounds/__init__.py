"""Bound-propagation engines behind the :class:`~certdp.bounds.base.Certificate` interface, and
their registry.

An engine turns parameter boxes and a batch into sound bounds on one training step (or on a
window of steps); :mod:`certdp.bounds.base` declares every hook and its contract.  Each engine is
one file (``ibp``, ``crown``, ``milp``) that imports only the base, :mod:`~certdp.bounds.interval`,
:mod:`~certdp.bounds.aggregate` and other engines' functions.  Importing this package imports
every module in it and registers each :class:`Certificate` subclass defined there with a
``name`` (``certificate=NAME`` picks one), so adding an engine is adding one file (and its
``configs/certificate/NAME.yaml``); :func:`register` adds one from elsewhere.
:mod:`~certdp.bounds.shared` wraps an engine for huge numbers of radii (no name: not registered).
"""

from __future__ import annotations

import importlib
import pkgutil

from certdp.bounds.base import Certificate
from certdp.errors import ConfigError
from certdp.registry import Registry

CERTIFICATES: Registry[type[Certificate]] = Registry("certificate")


def register(cls: type[Certificate]) -> type[Certificate]:
    """Register an engine class under its ``name`` (usable as a class decorator); a name another
    engine holds is refused (:class:`certdp.registry.Registry`)."""
    if not (isinstance(cls, type) and issubclass(cls, Certificate)):
        raise TypeError(f"{cls!r} is not a Certificate subclass")
    if not cls.name:
        raise TypeError(f"certificate {cls.__name__} has no name")
    CERTIFICATES[cls.name] = cls
    return cls


for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _mod = importlib.import_module(f"{__name__}.{_info.name}")
    for _obj in vars(_mod).values():
        if isinstance(_obj, type) and issubclass(_obj, Certificate) and _obj.__module__ == _mod.__name__ and _obj.name:
            register(_obj)


def get_certificate(name: str, **options) -> Certificate:
    """A fresh engine ``name`` built with its ``certificate.<opt>`` options.  An option the
    engine does not read is a one-line :class:`ConfigError` naming the options it reads (an
    explicit value is never dropped; the settings set aside a preset's options for other
    engines before they get here: :func:`certdp.settings.training.certificate_settings`)."""
    if name not in CERTIFICATES:
        raise ConfigError("certificate.name", f"unknown certificate '{name}'; allowed: {', '.join(sorted(CERTIFICATES))}")
    cls = CERTIFICATES[name]
    for opt in options:
        if opt not in cls.options:
            raise ConfigError(f"certificate.{opt}", f"not an option of the certificate '{name}'; allowed: "
                                                    f"{', '.join(cls.options) or 'none'}")
    return cls(**options)


def check_device(cert: Certificate | type[Certificate], device) -> None:
    """ConfigError (key ``device``) when ``cert`` (an engine or its class) cannot compute on ``device``'s type, naming the
    devices it can and the engines that can run there."""
    import torch
    kind = torch.device(device).type
    if kind not in cert.devices:
        others = [n for n, c in sorted(CERTIFICATES.items()) if kind in c.devices]
        raise ConfigError("device", f"the certificate '{cert.name}' does not run on {kind} ({cert.device_note}); "
                                    f"allowed: device={' or '.join(cert.devices)}, or certificate="
                                    f"{'|'.join(others)} on {kind}")


def check_supported(cert: Certificate, model) -> None:
    """ConfigError naming the engines that can bound ``model`` when ``cert`` cannot."""
    if not cert.supports(model):
        allowed = [n for n, c in sorted(CERTIFICATES.items()) if c.supports(model)]
        raise ConfigError("certificate.name", f"{cert.name} supports {cert.scope} only; "
                          f"allowed: {', '.join(allowed)} (the certificates of this model)")
