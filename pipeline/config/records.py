"""The typed records of a job config's blocks, beside its algorithm, data and kernel: where its
numerics run (:class:`DeviceSpec`), the Theorem 1 certificate's settings
(:class:`CertificateSpec`), the learning curve it measures instead of a fit
(:class:`CurveSpec`) and what it profiles (:class:`ProfileSpec`).

Each is made once, from a checked config (:meth:`pipeline.job.spec.JobSpec.from_config`), and
read by the job's code through its fields: nothing below the command line reads those keys
from a config. They live here, under the kernel blocks' providers (:mod:`pipeline.blocks`),
because a provider reads the job's device. The hyperparameter-learning block's record is
:class:`pipeline.job.hyper.HyperSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from algorithms.options import validate
from pipeline.config import plain_copy
from pipeline.config.keys import CERTIFICATE_OPTIONS


@dataclass(frozen=True)
class DeviceSpec:
    """``device`` and ``precision``: ``cpu`` (numpy, scipy, float64) or a PyTorch device
    (``torch:cpu``, ``cuda``, ``cuda:N``, :mod:`pipeline.blocks.device`) in float64 or
    float32."""

    name: str = "cpu"
    precision: str = "float64"

    @property
    def on_torch(self) -> bool:
        """Whether the fit's numerics run on a PyTorch device (not numpy's CPU)."""
        return self.name != "cpu"

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> DeviceSpec:
        """The record of a checked config's ``device`` and ``precision``."""
        return cls(str(config["device"]), str(config["precision"]))


@dataclass(frozen=True)
class CertificateSpec:
    """``certificate.*`` (:data:`pipeline.config.keys.CERTIFICATE_OPTIONS`), validated:
    whether a regression fit is certified (Theorem 1), the dual greedy's tolerance, its most
    steps and its candidate-subset size."""

    enabled: bool = True
    tol: float = 1e-3
    max_dual: int = 500
    kappa: int = 59

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> CertificateSpec:
        """The validated ``certificate`` block (an InputError line for a bad value)."""
        return cls(**validate(CERTIFICATE_OPTIONS, block, owner="the certificate",
                              prefix="certificate."))


@dataclass(frozen=True)
class CurveSpec:
    """``learning_curve``: Lemma 4's E^g(n) measured instead of a fit
    (:mod:`algorithms.curve_jobs`) when its block is set, its settings as given (their keys
    and values are checked by the curve job, whose messages name them); a fit when null or
    empty."""

    settings: Mapping[str, Any] | None = None

    @property
    def enabled(self) -> bool:
        """Whether the job measures a learning curve rather than fitting."""
        return bool(self.settings)

    @classmethod
    def of(cls, block: Any) -> CurveSpec:
        """The record of a checked ``learning_curve`` value (a copy of its block)."""
        return cls(plain_copy(dict(block)) if block else None)


@dataclass(frozen=True)
class ProfileSpec:
    """What a fit measures beside its time: the peak memory of its fit and prediction
    (``profile_memory``, tracemalloc)."""

    profile_memory: bool = False

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ProfileSpec:
        """The record of a checked config's ``profile_memory``."""
        return cls(bool(config["profile_memory"]))
